"""families/ltx2/model.py: with sound, consecutive frames by default, uniform sampling and an uncached run refused
in one paragraph; the loaded components carry both VAEs' facts."""

from __future__ import annotations

import pytest
import torch
from ltx2_configs import ltx2_cfg

from dit_lora.core.errors import UserError
from dit_lora.families.ltx2.model import DEFAULTS, make_components
from dit_lora.registry import get_family


def _sections(cfg):
    """The sections LTX2Notes.sample_notes reads: the run's training options and its family options."""
    return cfg.training, cfg.family_options


def test_sound_takes_consecutive_frames_by_default(tiny_folder):
    on = ltx2_cfg(tiny_folder)
    defaults = DEFAULTS.generic_defaults(on.model, on.family_options)
    assert defaults["train_batch_size"][0] == 1 and defaults["frame_sampling"][0] == "first"
    off = ltx2_cfg(tiny_folder, audio="off")
    assert "frame_sampling" not in DEFAULTS.generic_defaults(off.model, off.family_options)


@pytest.mark.parametrize("values, says", [
    ({"frame_sampling": "uniform"}, "--frame_sampling uniform spreads"),
    ({"cache_latents": False, "frame_sampling": "first"}, "--cache_latents false is not supported for LTX-2 with --audio on"),
])
def test_what_the_sound_cannot_follow_is_refused(tiny_folder, values, says):
    model = get_family("ltx2").model
    with pytest.raises(UserError, match=says):
        model.validate_config(ltx2_cfg(tiny_folder, height=64, width=64, max_num_frames=9, **values))
    model.validate_config(ltx2_cfg(tiny_folder, height=64, width=64, max_num_frames=9, audio="off", **values))


def test_components_carry_the_vaes_normalisation_and_the_audio_geometry(tiny):
    extra = {"audio_vae": tiny["audio_vae"], "connectors": tiny["connectors"]}
    comps = make_components(ltx2_cfg("x"), tiny["transformer"], tiny["vae"], tiny["text_encoder"], extra, {}, "cpu")
    state = comps.state
    torch.testing.assert_close(state.latents_mean.flatten(), tiny["vae"].latents_mean)
    assert state.vae_temporal == 4 and state.audio.mel_bins == 16 and state.audio_width == 8 and state.with_audio
    assert not any(p.requires_grad for m in (tiny["transformer"], *extra.values()) for p in m.parameters())


def test_clips_without_sound_are_counted_never_silently(tmp_path):
    from types import SimpleNamespace

    from audio_clips import write_clip

    from dit_lora.families.ltx2.model import LTX2Notes
    from dit_lora.families.ltx2.spec import TASK

    tone = write_clip(tmp_path / "tone.mp4", seconds=0.5, tone=440.0)
    silent = write_clip(tmp_path / "silent.mp4", seconds=0.5, tone=None)
    samples = [SimpleNamespace(path=p, is_image=False) for p in (tone, silent, silent)]
    notes = LTX2Notes(TASK)
    (line,) = notes.sample_notes(*_sections(ltx2_cfg("m")), samples)
    assert line.startswith("sound: 2 of 3 clips have no audio track") and "masked out of the loss" in line
    assert notes.sample_notes(*_sections(ltx2_cfg("m")), samples[:1]) == ["sound: all 1 clips have an audio track"]
    assert notes.sample_notes(*_sections(ltx2_cfg("m", audio="off")), samples) == []


def test_a_batch_of_clips_at_several_frame_rates_is_said():
    from types import SimpleNamespace

    from dit_lora.families.ltx2.model import LTX2Notes
    from dit_lora.families.ltx2.spec import TASK

    clips = [SimpleNamespace(path="x", is_image=True, source_fps=fps) for fps in (24.0, 30.0, 24.0)]
    notes = LTX2Notes(TASK)
    (line,) = notes.sample_notes(*_sections(ltx2_cfg("m", audio="off", train_batch_size=2)), clips)
    assert line.startswith("frame rates: the clips come at 2 rates (24, 30 fps); a batch of 2 places")
    assert notes.sample_notes(*_sections(ltx2_cfg("m", audio="off", train_batch_size=1)), clips) == []
    assert notes.sample_notes(*_sections(ltx2_cfg("m", audio="off", train_batch_size=2)), clips[::2]) == []


def test_a_caption_length_off_the_registers_is_refused_before_anything_loads(tiny_folder):
    """The tiny connectors have 8 registers (LTX-2's 128, read from the catalogue for the Hub id)."""
    from dit_lora.families.ltx2.model import check_caption_length

    check_caption_length(ltx2_cfg(tiny_folder, max_sequence_length=64))
    with pytest.raises(UserError, match=r"--max_sequence_length 60 is not a multiple of 8, .* Use 64\."):
        check_caption_length(ltx2_cfg(tiny_folder, max_sequence_length=60))
    with pytest.raises(UserError, match=r"--max_sequence_length 300 is not a multiple of 128, .* Use 256\."):
        get_family("ltx2").model.validate_config(ltx2_cfg("Lightricks/LTX-2", max_sequence_length=300))
