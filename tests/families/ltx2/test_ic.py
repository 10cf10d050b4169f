"""families/ltx2/ic.py and the kit's reference clips: the in-context step gives the transformer what diffusers'
``LTX2InContextPipeline`` gives it (the clip's tokens, then the reference's at timestep 0 with positions scaled by
the downscale factor), the reference is out of the loss, each clip finds its reference (metadata column or folder) or
the run stops in one paragraph, and the factor is written into the adapter's metadata."""

from __future__ import annotations

import json

import pytest
import torch
from ltx2_configs import ltx2_cfg

from dit_lora.contract.capabilities import TextSettings
from dit_lora.core.errors import UserError
from dit_lora.data.synthetic.clips import make_moving_square_dataset, write_moving_square_clip
from dit_lora.families.ltx2.ic import REFERENCE, LTX2ICLoss, stamp_factor, stamped_factor
from dit_lora.families.ltx2.model import make_components
from dit_lora.families.ltx2.spec import ltx2_spec


class Spy(torch.nn.Module):
    """Stands in for the transformer: records each call's arguments and answers zeros (the pipeline's step and the
    loss go on), ``reference_value`` on the tokens after ``target`` (what the loss must never read)."""

    def __init__(self, transformer, target: int = 0, reference_value: float = 0.0) -> None:
        super().__init__()
        self.inner, self.calls, self.target, self.value = transformer, [], target, reference_value
        self.config, self.rope, self.audio_rope = transformer.config, transformer.rope, transformer.audio_rope
        self.dtype, self.device = transformer.dtype, transformer.device

    def cache_context(self, name):
        return self.inner.cache_context(name)

    def forward(self, **kwargs):
        self.calls.append(kwargs)
        video = torch.zeros_like(kwargs["hidden_states"])
        video[:, self.target :] = self.value
        return video, torch.zeros_like(kwargs["audio_hidden_states"])


def _pipeline_call(tiny, factor: int):
    """One denoising step of ``LTX2InContextPipeline`` (no guidance) with a reference clip: the transformer's
    arguments."""
    from diffusers import LTX2InContextPipeline
    from diffusers.pipelines.ltx2.pipeline_ltx2_ic_lora import LTX2ReferenceCondition
    from PIL import Image

    spy = Spy(tiny["transformer"])
    parts = {k: tiny[k] for k in ("vae", "audio_vae", "text_encoder", "tokenizer", "connectors", "vocoder", "scheduler")}
    pipe = LTX2InContextPipeline(transformer=spy, **parts)
    pipe.set_progress_bar_config(disable=True)
    frames = [Image.new("RGB", (64, 64), (40 * i, 90, 200)) for i in range(9)]
    pipe(prompt="a square", reference_conditions=[LTX2ReferenceCondition(frames=frames)],
         reference_downscale_factor=factor, num_frames=9, height=64, width=64, frame_rate=24.0, num_inference_steps=2,
         guidance_scale=1.0, max_sequence_length=64, output_type="latent", generator=torch.manual_seed(0))
    # the conditional half of the call (the pipeline may batch an unconditional one beside it)
    return {k: v[:1] if isinstance(v, torch.Tensor) and v.ndim else v for k, v in spy.calls[0].items()}


def _ic_components(tiny, factor: int = 1):
    cfg = ltx2_cfg("x", family="ltx2_ic", reference_downscale_factor=factor)
    extra = {"audio_vae": tiny["audio_vae"], "connectors": tiny["connectors"]}
    comps = make_components(cfg, tiny["transformer"], tiny["vae"], tiny["text_encoder"], extra, {}, "cpu")
    comps.state.text = TextSettings(max_sequence_length=64)
    comps.state.reference_factor = factor
    return cfg, comps


@pytest.mark.parametrize("factor", [1, 2])
def test_the_step_gives_the_transformer_what_the_in_context_pipeline_gives_it(tiny, factor):
    theirs = _pipeline_call(tiny, factor)
    cfg, comps = _ic_components(tiny, factor)
    side = 8 // factor  # 64 px over the tiny VAE's 8x: 8 x 8 latents a frame, the reference's / factor
    target = 3 * 8 * 8
    reference_tokens = theirs["hidden_states"][:, target:]
    assert reference_tokens.shape[1] == 3 * side * side
    width = reference_tokens.shape[-1]
    batch = {
        "latents": torch.randn(1, width, 3, 8, 8),
        REFERENCE: reference_tokens.reshape(1, 3, side, side, width).permute(0, 4, 1, 2, 3).float(),
        "prompt_embeds": theirs["encoder_hidden_states"],
        "audio_prompt_embeds": theirs["audio_encoder_hidden_states"],
        "prompt_attention_mask": theirs["encoder_attention_mask"],
        "fps": 24.0,
    }
    spy = Spy(tiny["transformer"])
    LTX2ICLoss(None).compute_loss(comps, spy, batch, torch.Generator().manual_seed(0), cfg)
    ours = spy.calls[0]
    assert torch.equal(ours["video_coords"], theirs["video_coords"])  # the clip's positions, then the reference's
    assert torch.equal(ours["hidden_states"][:, target:], reference_tokens.to(ours["hidden_states"].dtype))
    for call in (ours, theirs):  # per token: the clip's sigma, the reference's 0
        steps = call["timestep"]
        assert steps.shape == (1, target + 3 * side * side)
        assert (steps[:, target:] == 0).all() and (steps[:, :target] > 0).all()
        assert steps[:, :target].unique().numel() == 1
    # strength 1: the pipeline leaves the attention unmasked, as the step does
    assert theirs["video_self_attention_mask"] is None and "video_self_attention_mask" not in ours


def test_the_reference_tokens_are_out_of_the_loss(tiny):
    cfg, comps = _ic_components(tiny)
    gen = torch.Generator().manual_seed(0)
    batch = {
        "latents": torch.randn(2, 8, 3, 8, 8, generator=gen),
        REFERENCE: torch.randn(2, 8, 3, 8, 8, generator=gen),
        "prompt_embeds": torch.randn(2, 64, 32, generator=gen),
        "audio_prompt_embeds": torch.randn(2, 64, 32, generator=gen),
        "prompt_attention_mask": torch.ones(2, 64, dtype=torch.long),
        "fps": 24.0,
    }
    losses = [LTX2ICLoss(None).compute_loss(comps, Spy(tiny["transformer"], 192, value), batch,
                                            torch.Generator().manual_seed(1), cfg) for value in (0.0, 1e6)]
    assert torch.isfinite(losses[0]) and torch.equal(losses[0], losses[1])


def _pairs(tmp_path, **kwargs):
    root = make_moving_square_dataset(tmp_path / "clips", n=3, num_frames=9, size=64, references=True, **kwargs)
    return root, [json.loads(line) for line in (root / "metadata.jsonl").read_text().splitlines()]


def _media(cfg):
    spec = ltx2_spec("ltx2_ic")
    return spec.data.data_handler(cfg, spec)


def test_each_clip_takes_the_reference_its_row_or_the_folder_names(tmp_path, tiny_folder):
    root, rows = _pairs(tmp_path)
    cfg = ltx2_cfg(tiny_folder, family="ltx2_ic", train_data_dir=str(root))
    samples = _media(cfg).list_samples()
    assert [s.conditions for s in samples] == [(str(root / r["reference_path"]),) for r in rows]
    assert all("references/" not in s.key for s in samples)  # a reference is no sample
    # a row naming none: the same-named clip of --reference_dir (musubi-tuner's and ai-toolkit's layout)
    (root / "metadata.jsonl").write_text("".join(json.dumps({"file_name": r["file_name"], "text": r["text"]}) + "\n"
                                                 for r in rows))
    folder = tmp_path / "refs"
    folder.mkdir()
    for r in rows:
        (folder / r["file_name"]).write_bytes((root / r["reference_path"]).read_bytes())
    by_folder = _media(ltx2_cfg(tiny_folder, family="ltx2_ic", train_data_dir=str(root),
                                reference_dir=str(folder))).list_samples()
    assert [s.conditions for s in by_folder] == [(str(folder / r["file_name"]),) for r in rows]
    with pytest.raises(UserError) as missing:
        _media(cfg).list_samples()
    text = str(missing.value)
    assert text.startswith("3 clip(s) of --train_data_dir have no reference clip in any of `reference_path`")
    assert "--reference_dir" in text and "clip_00000.mp4" in text and "\n" not in text


def test_a_changed_reference_is_a_new_cache_entry(tmp_path, tiny_folder):
    root, rows = _pairs(tmp_path)
    cfg = ltx2_cfg(tiny_folder, family="ltx2_ic", train_data_dir=str(root))
    before = _media(cfg).list_samples()[0].content_id()
    write_moving_square_clip(root / rows[0]["reference_path"], direction="top to bottom", size=64, outline=True)
    assert _media(cfg).list_samples()[0].content_id() != before


def test_a_clip_whose_reference_is_too_short_is_left_out_as_a_bad_clip_is(tmp_path, tiny_folder):
    root, rows = _pairs(tmp_path)
    write_moving_square_clip(root / rows[1]["reference_path"], num_frames=5, size=64, outline=True)
    values = {"train_data_dir": str(root), "max_num_frames": 9, "height": 64, "width": 64}
    media = _media(ltx2_cfg(tiny_folder, family="ltx2_ic", max_bad_samples_fraction=0.5, **values))
    quarantine, lines = [], []
    kept = media.screen(media.list_samples(), log=lines.append, quarantine=quarantine)
    assert [s.key for s in kept] == ["clip_00000.mp4", "clip_00002.mp4"] and [s.index for s in kept] == [0, 1]
    assert quarantine == [{"key": "clip_00001.mp4", "reason": "its reference clip has 5 frame(s); its clip trains 9"}]
    assert any(line.startswith("reference clips: 2, each decoded frame for frame") for line in lines)
    media = _media(ltx2_cfg(tiny_folder, family="ltx2_ic", **values))  # one of three: over the default 5%
    with pytest.raises(UserError) as short:
        media.screen(media.list_samples(), log=lambda line: None, quarantine=[])
    text = str(short.value)
    assert "clip_00001.mp4" in text and "its reference clip has 5 frame(s)" in text and "--max_bad_samples_fraction" in text


@pytest.mark.parametrize("values,needle", [
    ({"reference_downscale_factor": 3}, "--reference_downscale_factor 3 does not fit the 9x64x64 bucket"),
    ({"cache_latents": False}, "--cache_latents false is not supported for LTX-2 IC-LoRA"),
    ({"validation_reference": "nowhere.mp4"}, "--validation_reference `nowhere.mp4` does not exist"),
])
def test_what_an_in_context_run_cannot_take_is_refused_before_loading(tmp_path, tiny_folder, values, needle):
    root, _ = _pairs(tmp_path)
    cfg = ltx2_cfg(tiny_folder, family="ltx2_ic", train_data_dir=str(root), max_num_frames=9, height=64, width=64,
                   frame_buckets="9x64x64", **values)
    with pytest.raises(UserError, match=needle.replace("(", r"\(")):
        ltx2_spec("ltx2_ic").model.validate_config(cfg)


def test_the_downscale_factor_goes_into_the_adapters_metadata(tmp_path):
    from safetensors.torch import save_file

    path = tmp_path / "pytorch_lora_weights.safetensors"
    save_file({"a": torch.ones(2)}, str(path), metadata={"format": "pt"})
    assert stamped_factor(path) is None
    stamp_factor(path, 2)
    assert stamped_factor(path) == 2
    from safetensors.torch import load_file

    assert torch.equal(load_file(str(path))["a"], torch.ones(2))
