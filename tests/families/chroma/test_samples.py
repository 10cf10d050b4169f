"""Chroma's validation samples: the in-memory transformer's images equal the stock ChromaPipeline's for the same
prompt, both given boolean caption masks (the cached embeddings repeated per image, the VAE decoding in its own
dtype), and differ from what the pipeline's own float mask gives a short prompt."""

from __future__ import annotations

import torch


def _pixels(image) -> torch.Tensor:
    return torch.tensor(list(image.getdata()), dtype=torch.float32)


def test_in_memory_samples_are_the_pipelines_with_boolean_masks(tiny_chroma):
    from diffusers import ChromaPipeline

    from dit_lora.config import TrainConfig
    from dit_lora.contract.spec import configure
    from dit_lora.registry import get_spec

    spec = get_spec("chroma")
    cfg = TrainConfig.for_family("chroma", pretrained_model_name_or_path=str(tiny_chroma), mixed_precision="no",
                                 resolution=64, max_sequence_length=16, validation_inference_steps=2,
                                 num_validation_images=2, validation_guidance_scale=4.0)
    comps = spec.model.load_components(cfg, torch.device("cpu"))
    configure(spec, comps, cfg)
    cond = spec.encoders.encode_prompts(comps, ["a red circle"], with_negative=True)
    ours = spec.samples.generate(comps, comps.model, cond, cfg, seed=3)
    pipe = ChromaPipeline.from_pretrained(tiny_chroma, torch_dtype=torch.float32)
    pipe.set_progress_bar_config(disable=True)
    theirs = spec.samples.generate_with_pipeline(pipe, "a red circle", cfg, seed=3, num_images=2)
    assert len(ours) == len(theirs) == 2
    for a, b in zip(ours, theirs):
        assert (_pixels(a) - _pixels(b)).abs().max() <= 2  # the same images up to the last bit of the uint8 rounding
    floats = pipe("a red circle", height=64, width=64, num_inference_steps=2, guidance_scale=4.0,
                  max_sequence_length=16, generator=torch.Generator().manual_seed(3)).images[0]
    assert (_pixels(floats) - _pixels(theirs[0])).abs().max() > 2  # the stock float mask samples another image
