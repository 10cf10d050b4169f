"""families/hunyuanvideo15/loss.py: the condition channels as the pipelines build them, and the image tokens."""

from __future__ import annotations

import types

import torch

from dit_lora.families.hunyuanvideo15.loss import condition_channels, image_tokens


def test_text_to_video_conditions_on_nothing_and_image_to_video_on_its_first_frame():
    latents = torch.randn(2, 4, 3, 2, 2)
    cond, mask = condition_channels(latents, image_to_video=False)
    assert not cond.any() and not mask.any() and mask.shape == (2, 1, 3, 2, 2)
    cond, mask = condition_channels(latents, image_to_video=True)
    assert torch.equal(cond[:, :, 0], latents[:, :, 0]) and not cond[:, :, 1:].any()
    assert mask[:, :, 0].eq(1).all() and not mask[:, :, 1:].any()


def test_image_tokens_are_the_cached_ones_in_the_model_dtype_or_one_zero_token():
    model = types.SimpleNamespace(config=types.SimpleNamespace(image_embed_dim=16))
    like = torch.zeros(3, 5, 8, dtype=torch.bfloat16)
    zero = image_tokens(model, {}, like)
    assert zero.shape == (3, 1, 16) and not zero.any() and zero.dtype == torch.bfloat16
    cached = torch.randn(3, 4, 16)
    got = image_tokens(model, {"image_embeds": cached}, like)
    assert got.dtype == torch.bfloat16 and torch.equal(got, cached.to(torch.bfloat16))
