"""Lumina 2's validation samples: the in-memory transformer's images equal the stock Lumina2Pipeline's for the same
prompt (the cached embeddings and masks repeated per image), and a bf16 run's images decode in its fp32 VAE
(Lumina2Pipeline decodes its latents in their own dtype: the kit casts them, then gives the VAE back untouched)."""

from __future__ import annotations

import torch


def _pixels(image) -> torch.Tensor:
    return torch.tensor(list(image.getdata()), dtype=torch.float32)


def _loaded(tiny_lumina2, **options):
    from dit_lora.config import TrainConfig
    from dit_lora.contract.spec import configure
    from dit_lora.registry import get_spec

    spec = get_spec("lumina2")
    cfg = TrainConfig.for_family("lumina2", pretrained_model_name_or_path=str(tiny_lumina2), resolution=64,
                                 max_sequence_length=48, validation_inference_steps=2, num_validation_images=2,
                                 validation_guidance_scale=4.0, **options)
    comps = spec.model.load_components(cfg, torch.device("cpu"))
    configure(spec, comps, cfg)
    return spec, cfg, comps, spec.encoders.encode_prompts(comps, ["a red circle"], with_negative=True)


def test_in_memory_samples_are_the_pipelines(tiny_lumina2):
    from diffusers import Lumina2Pipeline

    spec, cfg, comps, cond = _loaded(tiny_lumina2, mixed_precision="no")
    ours = spec.samples.generate(comps, comps.model, cond, cfg, seed=3)
    pipe = Lumina2Pipeline.from_pretrained(tiny_lumina2, torch_dtype=torch.float32)
    pipe.set_progress_bar_config(disable=True)
    theirs = spec.samples.generate_with_pipeline(pipe, "a red circle", cfg, seed=3, num_images=2)
    assert len(ours) == len(theirs) == 2
    for a, b in zip(ours, theirs):
        assert (_pixels(a) - _pixels(b)).abs().max() <= 2  # the same images up to the last bit of the uint8 rounding


def test_a_bf16_runs_samples_decode_in_its_fp32_vae(tiny_lumina2):
    spec, cfg, comps, cond = _loaded(tiny_lumina2, mixed_precision="bf16")
    vae = comps.encoders["vae"]
    assert comps.model.dtype == torch.bfloat16 and vae.dtype == torch.float32
    images = spec.samples.generate(comps, comps.model, cond, cfg, seed=3)
    assert len(images) == 2 and images[0].size == (64, 64)
    assert "decode" not in vars(vae)  # the cast was only for the call
