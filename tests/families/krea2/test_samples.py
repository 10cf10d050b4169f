"""Krea 2's validation samples: the in-memory transformer's images (cached caption states and masks, the empty
negative's for real CFG, the VAE decoding in fp32) equal the stock Krea2Pipeline's for the same prompt."""

from __future__ import annotations

import torch


def _pixels(image) -> torch.Tensor:
    return torch.tensor(list(image.getdata()), dtype=torch.float32)


def test_in_memory_samples_are_the_pipelines(tiny_krea2):
    from diffusers import Krea2Pipeline

    from dit_lora.config import TrainConfig
    from dit_lora.contract.spec import configure
    from dit_lora.registry import get_spec

    spec = get_spec("krea2")
    cfg = TrainConfig.for_family("krea2", pretrained_model_name_or_path=str(tiny_krea2), mixed_precision="no",
                                 resolution=64, max_sequence_length=16, validation_inference_steps=2,
                                 num_validation_images=2, validation_guidance_scale=4.5)
    comps = spec.model.load_components(cfg, torch.device("cpu"))
    configure(spec, comps, cfg)
    cond = spec.encoders.encode_prompts(comps, ["a red circle"], with_negative=True)
    ours = spec.samples.generate(comps, comps.model, cond, cfg, seed=3)
    pipe = Krea2Pipeline.from_pretrained(tiny_krea2, torch_dtype=torch.float32)
    pipe.set_progress_bar_config(disable=True)
    theirs = spec.samples.generate_with_pipeline(pipe, "a red circle", cfg, seed=3, num_images=2)
    assert len(ours) == len(theirs) == 2 and ours[0].size == (64, 64)
    for a, b in zip(ours, theirs):
        assert (_pixels(a) - _pixels(b)).abs().max() <= 2  # the same images up to the last bit of the uint8 rounding
