"""The kit's packed latents are FluxPipeline's own: pack/unpack and the position ids against its static methods (an
odd grid, batch 2), the decode of its packed latent output against its own decode, and the size refusal."""

from __future__ import annotations

import pytest
import torch


def test_packing_and_ids_are_the_pipelines():
    from diffusers import FluxPipeline

    from dit_lora.kit.packed import latent_ids, pack, unpack

    latents = torch.randn(2, 4, 6, 10)
    packed = pack(latents)
    assert torch.equal(packed, FluxPipeline._pack_latents(latents, 2, 4, 6, 10))
    assert torch.equal(unpack(packed, 6, 10), FluxPipeline._unpack_latents(packed, 6 * 8, 10 * 8, 8))
    theirs = FluxPipeline._prepare_latent_image_ids(2, 3, 5, "cpu", torch.float32)
    assert torch.equal(latent_ids(3, 5, "cpu", torch.float32), theirs)


def test_decode_is_the_pipelines(tmp_path):
    from diffusers import FluxPipeline

    from dit_lora.kit.packed import decode_packed
    from dit_lora.families.flux.demo import build_tiny_flux_pipeline

    pipe = FluxPipeline.from_pretrained(build_tiny_flux_pipeline(tmp_path / "tiny"), torch_dtype=torch.float32)
    pipe.set_progress_bar_config(disable=True)
    kwargs = dict(prompt="a red circle", height=64, width=48, num_inference_steps=2, max_sequence_length=16)
    tokens = pipe(**kwargs, output_type="latent", generator=torch.manual_seed(0)).images
    ours = decode_packed(pipe, pipe.vae, tokens, 64, 48)[0]
    theirs = pipe(**kwargs, output_type="pil", generator=torch.manual_seed(0)).images[0]
    assert ours.size == theirs.size == (48, 64) and list(ours.getdata()) == list(theirs.getdata())


def test_a_size_the_pipeline_cannot_take_is_one_paragraph():
    from dit_lora.core.errors import UserError
    from dit_lora.kit.packed import check_resolution

    check_resolution(1024, "FLUX.1", "FluxPipeline")
    with pytest.raises(UserError, match=r"--resolution 1000 is not divisible by 16.*FluxPipeline takes only sizes divisible by 16.*Use 992 or 1008"):
        check_resolution(1000, "FLUX.1", "FluxPipeline")
