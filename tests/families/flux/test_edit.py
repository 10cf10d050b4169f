"""FLUX.1 Kontext against diffusers' own FluxKontextPipeline: the step's image sequence is the pipeline's (target
tokens then the control's, ids ``(1, h, w)``, the target's prediction kept), the cached control latents are its
``_encode_vae_image``'s, the in-memory validation edit is the reloaded pipeline's; the options an edit run cannot
take are refused in one paragraph."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
import torch
from diffusers import FluxKontextPipeline
from PIL import Image

from helpers import Recorder
from dit_lora.config import TrainConfig
from dit_lora.contract.family import Components
from dit_lora.contract.spec import configure
from dit_lora.core.errors import UserError
from dit_lora.families.flux.state import FluxRun
from dit_lora.registry import get_spec

SCHEDULER = {"base_image_seq_len": 256, "base_shift": 0.5, "max_image_seq_len": 4096, "max_shift": 1.15,
             "shift": 3.0, "use_dynamic_shifting": True}


def _cfg(model="m", **values):
    return TrainConfig.for_family("flux_kontext", pretrained_model_name_or_path=str(model), **values)


def test_the_step_appends_the_control_tokens_as_the_pipeline_does():
    """Control tokens after the target's, packed as the pipeline packs them, ids with first axis 1; the shift read at
    the target's tokens (the same sigmas as a FLUX.1 step on the same draw); only the target's prediction is kept."""
    gen = torch.Generator().manual_seed(0)
    batch = {"latents": torch.randn(2, 4, 6, 8, generator=gen), "control_latents": torch.randn(2, 4, 6, 8, generator=gen),
             "prompt_embeds": torch.randn(2, 10, 12, generator=gen), "pooled_prompt_embeds": torch.randn(2, 5, generator=gen)}
    kontext, flux = Recorder(), Recorder()
    comps = Components(model=None, scheduler=None, state=FluxRun(scheduler_config=SCHEDULER))
    get_spec("flux_kontext").loss.compute_loss(comps, kontext, batch, torch.Generator().manual_seed(5), _cfg())
    flux_cfg = TrainConfig.for_family("flux", pretrained_model_name_or_path="m")
    get_spec("flux").loss.compute_loss(comps, flux, batch, torch.Generator().manual_seed(5), flux_cfg)
    (call,), (plain,) = kontext.calls, flux.calls
    control = FluxKontextPipeline._pack_latents(batch["control_latents"], 2, 4, 6, 8)
    torch.testing.assert_close(call["hidden_states"], torch.cat([plain["hidden_states"], control], dim=1))
    ids = FluxKontextPipeline._prepare_latent_image_ids(2, 3, 4, "cpu", torch.float32)
    control_ids = ids.clone()
    control_ids[..., 0] = 1
    assert torch.equal(call["img_ids"], torch.cat([ids, control_ids]))
    assert torch.equal(call["timestep"], plain["timestep"]) and torch.equal(call["guidance"], plain["guidance"])


def test_the_loss_reads_only_the_targets_prediction():
    """A model whose output on the control tokens is garbage gives the loss of one that predicts them right."""
    gen = torch.Generator().manual_seed(1)
    batch = {"latents": torch.randn(1, 4, 4, 4, generator=gen), "control_latents": torch.randn(1, 4, 4, 4, generator=gen),
             "prompt_embeds": torch.randn(1, 3, 12, generator=gen), "pooled_prompt_embeds": torch.randn(1, 5, generator=gen)}

    def model(*, hidden_states, garbage, **_):
        out = hidden_states.clone()
        out[:, 4:] = garbage
        return (out,)

    comps = Components(model=None, scheduler=None, state=FluxRun(scheduler_config=SCHEDULER))
    loss = get_spec("flux_kontext").loss
    losses = [loss.compute_loss(comps, lambda g=g, **kw: model(garbage=g, **kw), batch, torch.Generator().manual_seed(2),
                                _cfg()) for g in (0.0, float("nan"))]
    assert torch.isfinite(losses[1]) and torch.equal(losses[0], losses[1])


def test_the_cached_control_latents_are_the_pipelines(tiny_kontext, tmp_path):
    """``encode_samples``: the captions as FLUX.1 encodes them, the control prepared as its target (bucket, crop) and
    encoded as FluxKontextPipeline's ``_encode_vae_image`` encodes an image of that size."""
    spec = get_spec("flux_kontext")
    cfg = _cfg(tiny_kontext, mixed_precision="no", resolution=32, max_sequence_length=16, center_crop=True)
    comps = spec.model.load_components(cfg, torch.device("cpu"))
    configure(spec, comps, cfg)
    Image.effect_noise((32, 32), 60).convert("RGB").save(tmp_path / "c.png")
    sample = SimpleNamespace(key="a.png", caption="make it red", bucket=(32, 32), conditions=(str(tmp_path / "c.png"),))
    out = spec.encoders.encode_samples(comps, [sample])
    captions = spec.encoders.encode_prompts(comps, ["make it red"])
    assert torch.equal(out["prompt_embeds"], captions["prompt_embeds"])
    pipe = FluxKontextPipeline.from_pretrained(tiny_kontext, torch_dtype=torch.float32)
    with Image.open(tmp_path / "c.png") as image:
        pixels = pipe.image_processor.preprocess(image.convert("RGB"), 32, 32)
    theirs = pipe._encode_vae_image(pixels, generator=None)
    torch.testing.assert_close(out["control_latents"], theirs, atol=1e-5, rtol=1e-5)


def test_in_memory_edits_are_the_reloaded_pipelines(tiny_kontext, tmp_path):
    """The validation edit of the first sample's control image from the in-memory transformer equals the stock
    FluxKontextPipeline's on the same image (the control at the run's size, no snap to the preferred sizes)."""
    spec = get_spec("flux_kontext")
    cfg = _cfg(tiny_kontext, mixed_precision="no", resolution=64, max_sequence_length=16, validation_inference_steps=2,
               num_validation_images=2, validation_guidance_scale=2.5, validation_prompt="make it red")
    comps = spec.model.load_components(cfg, torch.device("cpu"))
    configure(spec, comps, cfg)
    Image.effect_noise((80, 64), 60).convert("RGB").save(tmp_path / "c.png")
    spec.setup.inspect_samples(comps, cfg, [SimpleNamespace(conditions=(str(tmp_path / "c.png"),))])
    assert comps.state.validation_control.shape == (3, 64, 64)
    cond = spec.encoders.encode_prompts(comps, ["make it red"])
    ours = spec.samples.generate(comps, comps.model, cond, cfg, seed=3)
    pipe = FluxKontextPipeline.from_pretrained(tiny_kontext, torch_dtype=torch.float32)
    pipe.set_progress_bar_config(disable=True)
    theirs = spec.samples.generate_with_pipeline(pipe, "make it red", cfg, seed=3, num_images=2, comps=comps)
    assert len(ours) == len(theirs) == 2 and ours[0].size == (64, 64)
    for a, b in zip(ours, theirs):
        diff = torch.tensor(list(a.getdata()), dtype=torch.float32) - torch.tensor(list(b.getdata()), dtype=torch.float32)
        assert diff.abs().max() <= 2  # the same images up to the control's and the output's uint8 rounding


def test_the_options_an_edit_run_cannot_take_are_refused(tiny_kontext, tmp_path):
    """(A FLUX.1 [dev] folder under --family flux_kontext: tests/setup/test_family_inference.py's registry-wide
    refusal of a sibling name's folder.)"""
    for flag, value in (("random_flip", True), ("cache_latents", False)):
        with pytest.raises(UserError, match=f"--{flag}.* not supported for FLUX.1 Kontext"):
            get_spec("flux_kontext").model.validate_config(_cfg(tiny_kontext, resolution=64, **{flag: value}))
    (tmp_path / "junk.png").write_bytes(b"not an image")
    with pytest.raises(UserError, match="`.*junk.png` cannot be read as an image.*Give --validation_image an image"):
        get_spec("flux_kontext").model.validate_config(_cfg(tiny_kontext, resolution=64,
                                                            validation_image=str(tmp_path / "junk.png")))
    with pytest.raises(UserError, match="--validation_image `.*gone.png` does not exist"):
        get_spec("flux_kontext").model.validate_config(_cfg(tiny_kontext, resolution=64,
                                                            validation_image=str(tmp_path / "gone.png")))
    get_spec("flux_kontext").model.validate_config(_cfg(tiny_kontext, resolution=64, caption_dropout_probability=0.1))
