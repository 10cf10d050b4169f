"""families/flux2/encoders.py: latents and prompt embeddings exactly as the FLUX.2 pipelines compute them."""

from __future__ import annotations

import pytest
import torch
from diffusers import Flux2KleinPipeline, Flux2Pipeline
from flux2_configs import flux2_cfg

from dit_lora.contract.capabilities import TextSettings
from dit_lora.contract.family import Components
from dit_lora.families.flux2.demo import build_tiny_flux2_components
from dit_lora.families.flux2.encoders import (
    default_out_layers,
    normalise_latents,
    out_layers,
    text_depth,
)
from dit_lora.families.flux2.state import Flux2Run
from dit_lora.registry import get_family

PIPELINES = {"dev": Flux2Pipeline, "klein": Flux2KleinPipeline}


@pytest.fixture(scope="module", params=["dev", "klein"])
def tiny(request):
    """``(variant, components in fp32, the stock pipeline built from them)``."""
    parts = build_tiny_flux2_components(request.param)
    parts["transformer"].float()
    parts["text_encoder"].float()
    return request.param, parts, PIPELINES[request.param](**parts)


def _comps(variant, parts, length=16):
    pipeline = PIPELINES[variant].__name__
    state = Flux2Run(pipeline_class=pipeline, out_layers=out_layers(pipeline, text_depth(parts["text_encoder"])),
                     text=TextSettings(max_sequence_length=length))
    encoders = {k: parts[k] for k in ("vae", "text_encoder", "tokenizer")}
    return Components(model=None, scheduler=None, encoders=encoders, state=state)


def test_the_stacked_layers_are_the_pipelines_defaults_clamped_to_the_depth():
    assert default_out_layers("Flux2Pipeline") == (10, 20, 30)
    assert default_out_layers("Flux2KleinPipeline") == (9, 18, 27)
    assert out_layers("Flux2Pipeline", 40) == (10, 20, 30) and out_layers("Flux2KleinPipeline", 36) == (9, 18, 27)
    assert out_layers("Flux2Pipeline", 2) == (2, 2, 2) and out_layers("Flux2KleinPipeline", 20) == (9, 18, 20)


def test_latents_are_the_pipelines_patchified_normalised_latents(tiny):
    variant, parts, pipe = tiny
    pixels = torch.rand(2, 3, 64, 48) * 2 - 1
    latents = get_family("flux2").encoders.encode_images(_comps(variant, parts), pixels)
    expected = pipe._encode_vae_image(pixels, generator=None)  # retrieve_latents(argmax), patchify, batch-norm
    assert latents.shape == (2, 16, 4, 3) and latents.dtype == torch.float32
    torch.testing.assert_close(latents, expected)
    # the statistics matter: the demo VAE's are not 0 and 1
    raw = parts["vae"].encode(pixels).latent_dist.mode()
    assert not torch.allclose(normalise_latents(parts["vae"], raw), Flux2Pipeline._patchify_latents(raw))


def test_prompt_embeddings_are_the_pipelines_encode_prompt(tiny):
    variant, parts, pipe = tiny
    comps = _comps(variant, parts)
    captions = ["a red circle on a blue background", "a green square"]
    out = get_family("flux2").encoders.encode_prompts(comps, captions, with_negative=True)
    layers = comps.state.out_layers
    expected, _ = pipe.encode_prompt(prompt=captions, max_sequence_length=16, text_encoder_out_layers=layers)
    assert out["prompt_embeds"].shape == (2, 16, 48)  # 3 stacked layers x hidden 16 = joint_attention_dim
    assert torch.equal(out["prompt_embeds"], expected)
    negative, _ = pipe.encode_prompt(prompt=["", ""], max_sequence_length=16, text_encoder_out_layers=layers)
    assert torch.equal(out["negative_prompt_embeds"], negative)


def test_cache_identity_names_what_changes_the_encoding():
    family = get_family("flux2")
    short, long = flux2_cfg(max_sequence_length=32), flux2_cfg()
    assert family.encoders.cache_identity(short) != family.encoders.cache_identity(long)
    assert family.encoders.cache_identity(long)["max_sequence_length"] == 512
    comps = Components(model=None, scheduler=None, state=Flux2Run(out_layers=(9, 18, 27)))
    assert family.encoders.cache_identity(long, comps)["out_layers"] == [9, 18, 27]
    assert family.encoders.text_settings(short).max_sequence_length == 32
