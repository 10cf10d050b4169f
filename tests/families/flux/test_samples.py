"""FLUX.1's samples: the in-memory decode of the pipeline's packed latents is the pipeline's own decode."""

from __future__ import annotations

import torch


def test_decode_is_the_pipelines(tiny_flux):
    from diffusers import FluxPipeline

    from dit_lora.families.flux.samples import decode

    pipe = FluxPipeline.from_pretrained(tiny_flux, torch_dtype=torch.float32)
    pipe.set_progress_bar_config(disable=True)
    kwargs = dict(prompt="a red circle", height=64, width=64, num_inference_steps=2, max_sequence_length=16)
    tokens = pipe(**kwargs, output_type="latent", generator=torch.manual_seed(0)).images
    ours = decode(pipe, pipe.vae, tokens, 64, 64)[0]
    theirs = pipe(**kwargs, output_type="pil", generator=torch.manual_seed(0)).images[0]
    assert ours.size == theirs.size and list(ours.getdata()) == list(theirs.getdata())
