"""FLUX.1's loss: its packing and position ids are FluxPipeline's own."""

from __future__ import annotations

import torch


def test_packing_and_ids_are_the_pipelines():
    """pack/unpack and the latent ids against FluxPipeline's static methods, on an odd grid and batch 2."""
    from diffusers import FluxPipeline

    from dit_lora.families.flux.loss import latent_ids, pack, unpack

    latents = torch.randn(2, 4, 6, 10)
    packed = pack(latents)
    assert torch.equal(packed, FluxPipeline._pack_latents(latents, 2, 4, 6, 10))
    assert torch.equal(unpack(packed, 6, 10), FluxPipeline._unpack_latents(packed, 6 * 8, 10 * 8, 8))
    theirs = FluxPipeline._prepare_latent_image_ids(2, 3, 5, "cpu", torch.float32)
    assert torch.equal(latent_ids(3, 5, "cpu", torch.float32), theirs)
