"""families/wan/encoders.py on tiny offline pipelines: latents and prompts exactly as diffusers' Wan pipelines make
and read them.

References (diffusers 0.42.1, ``pipelines/wan/pipeline_wan.py``): ``_get_t5_prompt_embeds`` (prompts cut to their
token count and zero-padded to ``max_sequence_length``) and the decode path (``latents / (1 / latents_std) +
latents_mean``).
"""

from __future__ import annotations

import pytest
import torch
from wan_tables import wan_vae

from dit_lora.families.wan.demo import TINY_WAN_GEOMETRY

FRAMES, HEIGHT, WIDTH = (TINY_WAN_GEOMETRY[k] for k in ("num_frames", "height", "width"))
PROMPTS = ["a red square moving left to right", "blue"]


@pytest.fixture(scope="module", autouse=True)
def one_thread():
    """The tiny models are far faster on one intra-op thread."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


# ---- encoding --------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("variant", ["2.1-t2v", "2.2-ti2v"])
def test_latents_are_the_normalised_posterior_mode(wan_load, wan_model, wan_kit, variant):
    family, _, comps = wan_load(variant)
    pixels = wan_kit.clips()
    latents = family.encoders.encode_images(comps, pixels)["latents"]
    vae = wan_vae(wan_model(variant))  # an independent copy, normalised with its config's own lists
    with torch.no_grad():
        mode = vae.encode(pixels.permute(0, 2, 1, 3, 4)).latent_dist.mode()
    mean = torch.tensor(vae.config.latents_mean).view(1, -1, 1, 1, 1)
    std = torch.tensor(vae.config.latents_std).view(1, -1, 1, 1, 1)
    assert latents.dtype == torch.float32
    assert latents.shape == (2, vae.config.z_dim, (FRAMES - 1) // 4 + 1, *mode.shape[-2:])
    torch.testing.assert_close(latents, (mode - mean) / std, rtol=1e-5, atol=1e-5)
    assert not torch.allclose(latents, mode, atol=1e-2)  # the normalisation is not the identity here


@pytest.mark.parametrize("variant", ["2.1-t2v", "2.2-ti2v"])
def test_cached_latents_decode_through_wan_pipeline_to_the_clip_s_vae_decoding(wan_load, wan_model, wan_kit, variant):
    """WanPipeline's own decode path (the denoising loop's last latents replaced by the cached ones through
    ``callback_on_step_end``) gives what the VAE decodes from the raw posterior mode."""
    from diffusers import WanPipeline

    family, _, comps = wan_load(variant)
    pixels = wan_kit.clips(batch=1)
    cached = family.encoders.encode_images(comps, pixels)["latents"]
    pipe = WanPipeline.from_pretrained(wan_model(variant), torch_dtype=torch.float32)
    pipe.set_progress_bar_config(disable=True)
    video = pipe(
        PROMPTS[0],
        height=HEIGHT,
        width=WIDTH,
        num_frames=FRAMES,
        num_inference_steps=1,
        guidance_scale=1.0,
        output_type="pt",
        callback_on_step_end=lambda p, i, t, kw: {"latents": cached},
    ).frames  # (B, F, 3, H, W) in [0, 1]
    vae = pipe.vae
    with torch.no_grad():
        mode = vae.encode(pixels.permute(0, 2, 1, 3, 4)).latent_dist.mode()
        direct = vae.decode(mode).sample.permute(0, 2, 1, 3, 4)
    torch.testing.assert_close(torch.as_tensor(video), (direct / 2 + 0.5).clamp(0, 1), rtol=0, atol=1e-4)


def test_prompt_embeddings_are_wan_pipeline_encode_prompt(wan_load, wan_model):
    from diffusers import WanPipeline

    family, _, comps = wan_load("2.1-t2v")
    got = family.encoders.encode_prompts(comps, PROMPTS, with_negative=True)
    pipe = WanPipeline.from_pretrained(wan_model("2.1-t2v"), torch_dtype=torch.float32)
    with torch.no_grad():
        embeds, negative = pipe.encode_prompt(
            PROMPTS, negative_prompt="", do_classifier_free_guidance=True, max_sequence_length=512
        )
    assert got["prompt_embeds"].shape == (2, 512, comps.encoders["text_encoder"].config.d_model)
    torch.testing.assert_close(got["prompt_embeds"], embeds, rtol=0, atol=0)
    torch.testing.assert_close(got["negative_prompt_embeds"], negative, rtol=0, atol=0)
    lengths = pipe.tokenizer(
        PROMPTS, padding="max_length", max_length=512, truncation=True, return_tensors="pt"
    ).attention_mask.sum(1)
    assert lengths[0] != lengths[1]
    for row, n in zip(got["prompt_embeds"], lengths.tolist()):
        assert not row[n:].any()  # zeros after the prompt's own tokens
        assert bool((row[:n].abs().sum(-1) > 0).all())  # and none among them


# ---- timesteps ------------------------------------------------------------------------------------------------
