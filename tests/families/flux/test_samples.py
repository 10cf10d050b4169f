"""FLUX.1's validation samples: the in-memory transformer's images equal the stock FluxPipeline's for the same
prompt (the cached embeddings repeated per image, the VAE decoding in its own dtype)."""

from __future__ import annotations

import torch


def test_in_memory_samples_are_the_pipelines(tiny_flux):
    from diffusers import FluxPipeline

    from dit_lora.config import TrainConfig
    from dit_lora.contract.spec import configure
    from dit_lora.registry import get_spec

    spec = get_spec("flux")
    cfg = TrainConfig.for_family("flux", pretrained_model_name_or_path=str(tiny_flux), mixed_precision="no",
                                 resolution=64, max_sequence_length=16, validation_inference_steps=2,
                                 num_validation_images=2, validation_guidance_scale=3.5)
    comps = spec.model.load_components(cfg, torch.device("cpu"))
    configure(spec, comps, cfg)
    cond = spec.encoders.encode_prompts(comps, ["a red circle"])
    ours = spec.samples.generate(comps, comps.model, cond, cfg, seed=3)
    pipe = FluxPipeline.from_pretrained(tiny_flux, torch_dtype=torch.float32)
    pipe.set_progress_bar_config(disable=True)
    theirs = spec.samples.generate_with_pipeline(pipe, "a red circle", cfg, seed=3, num_images=2)
    assert len(ours) == len(theirs) == 2
    for a, b in zip(ours, theirs):
        diff = torch.tensor(list(a.getdata()), dtype=torch.float32) - torch.tensor(list(b.getdata()), dtype=torch.float32)
        assert diff.abs().max() <= 2  # the same images up to the last bit of the uint8 rounding
