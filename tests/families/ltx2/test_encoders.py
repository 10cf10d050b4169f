"""families/ltx2/encoders.py: the cached latents and caption embeddings are what ``LTX2Pipeline`` feeds the
transformer, each clip's sound and rate are cached beside them, the caption length is refused off the registers."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
import torch
from audio_clips import write_clip
from ltx2_configs import ltx2_cfg

from dit_lora.contract.capabilities import TextSettings
from dit_lora.contract.family import Components
from dit_lora.core.errors import UserError
from dit_lora.families.ltx2.encoders import FPS, LTX2Encoders, LTX2Setup
from dit_lora.families.ltx2.model import make_components


def _comps(tiny, **values) -> Components:
    extra = {"audio_vae": tiny["audio_vae"], "connectors": tiny["connectors"]}
    comps = make_components(ltx2_cfg("x", **values), tiny["transformer"], tiny["vae"], tiny["text_encoder"], extra, {},
                            "cpu")
    comps.encoders["tokenizer"] = tiny["tokenizer"]
    comps.state.text = TextSettings(max_sequence_length=16)
    return comps


def test_latents_are_the_pipelines_normalised_latents(tiny):
    from diffusers import LTX2Pipeline

    clip = torch.rand(1, 9, 3, 64, 64, generator=torch.Generator().manual_seed(0)) * 2 - 1
    latents = LTX2Encoders().encode_images(_comps(tiny), clip)["latents"]
    vae = tiny["vae"]
    with torch.no_grad():
        raw = vae.encode(clip.permute(0, 2, 1, 3, 4)).latent_dist.mode()
    expected = LTX2Pipeline._normalize_latents(raw, vae.latents_mean, vae.latents_std, vae.config.scaling_factor)
    torch.testing.assert_close(latents, expected)


def test_captions_are_the_connectors_outputs_of_the_pipelines_prompts(tiny):
    from diffusers import LTX2Pipeline

    out = LTX2Encoders().encode_prompts(_comps(tiny), ["a red square", "a blue square moving left"])
    pipe = LTX2Pipeline(**{k: tiny[k] for k in ("scheduler", "vae", "audio_vae", "text_encoder", "tokenizer",
                                                 "connectors", "transformer", "vocoder")})
    with torch.no_grad():
        embeds, mask, _, _ = pipe.encode_prompt(["a red square", "a blue square moving left"],
                                                do_classifier_free_guidance=False, max_sequence_length=16)
        video, audio, joint = pipe.connectors(embeds, mask, padding_side="left")
    torch.testing.assert_close(out["prompt_embeds"], video)
    torch.testing.assert_close(out["audio_prompt_embeds"], audio)
    assert torch.equal(out["prompt_attention_mask"], joint)


def test_samples_cache_their_sound_and_frame_rate(tiny, tmp_path):
    clip = write_clip(tmp_path / "tone.mp4", seconds=1.0, fps=24, tone=440.0)
    silent = write_clip(tmp_path / "silent.mp4", seconds=1.0, fps=12, tone=None)
    samples = [SimpleNamespace(path=p, caption="a red square", bucket=(9, 64, 64), source_fps=fps, is_image=False)
               for p, fps in ((clip, 24.0), (silent, 12.0))]
    out = LTX2Encoders().encode_samples(_comps(tiny), samples)
    assert out[FPS].tolist() == [24.0, 12.0]
    # 9 frames at 24 fps: 0.375 s, 9 latent steps; at 12 fps 0.75 s, 19 (ragged, each its own length)
    assert out["audio_latents_lengths"].tolist() == [9, 19] and out["audio_latents"].shape == (2, 19, 8)
    assert out["audio_mask"][0, :9].all() and not out["audio_mask"][1].any()
    assert "audio_latents" not in LTX2Encoders().encode_samples(_comps(tiny, audio="off"), samples)


def test_image_to_video_refuses_stills_and_keeps_the_first_frame(tiny, tmp_path):
    from types import SimpleNamespace as NS

    from dit_lora.families.ltx2.spec import TASKS

    comps = _comps(tiny)
    setup = LTX2Setup(LTX2Encoders(), TASKS["ltx2_i2v"])
    with pytest.raises(UserError, match=r"1 training sample\(s\) are images, .* --family ltx2 \(text-to-video\)"):
        setup.inspect_samples(comps, ltx2_cfg("x", family="ltx2_i2v"), [NS(key="a.png", bucket=(1, 64, 64))])
    LTX2Setup(LTX2Encoders(), TASKS["ltx2"]).inspect_samples(comps, ltx2_cfg("x"), [NS(key="a.png", bucket=(1, 64, 64))])


def test_the_cache_identity_follows_the_sound_and_the_caption_length(tiny_folder):
    identity = LTX2Encoders().cache_identity
    on, off = identity(ltx2_cfg(tiny_folder)), identity(ltx2_cfg(tiny_folder, audio="off"))
    assert on != off and on != identity(ltx2_cfg(tiny_folder, max_sequence_length=128))
    assert on["encoders_stamp"] and on["audio"] == "on"


@pytest.mark.parametrize("factor", [1, 2])
def test_the_reference_is_cached_at_its_clips_bucket_over_the_downscale_factor(tiny, tmp_path, factor):
    """The setup records --reference_downscale_factor and the frame sampling; the cache then holds each reference as
    the video VAE's latents of its clip's frames at the bucket's sides / the factor (the option is never ignored)."""
    from dit_lora.data.synthetic.clips import write_moving_square_clip
    from dit_lora.families.ltx2.encoders import REFERENCE, LTX2ICEncoders, LTX2ICSetup
    from dit_lora.families.ltx2.spec import TASKS

    reference = write_moving_square_clip(tmp_path / "ref.mp4", num_frames=9, size=64, outline=True)
    clip = write_moving_square_clip(tmp_path / "clip.mp4", num_frames=9, size=64)
    comps = _comps(tiny)
    cfg = ltx2_cfg("x", family="ltx2_ic", reference_downscale_factor=factor, frame_sampling="first",
                   validation_prompt="")
    LTX2ICSetup(LTX2ICEncoders(), TASKS["ltx2_ic"]).configure(comps, cfg)
    assert (comps.state.reference_factor, comps.state.frame_start) == (factor, "first")
    sample = SimpleNamespace(path=str(clip), caption="a red square", bucket=(9, 64, 64), source_fps=8.0,
                             is_image=False, conditions=(str(reference),))
    latents = LTX2ICEncoders().encode_samples(comps, [sample])[REFERENCE]
    assert latents.shape[2:] == (3, 8 // factor, 8 // factor)  # 9 frames -> 3 latent frames; 64 px / 8x VAE
