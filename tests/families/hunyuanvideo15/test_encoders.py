"""families/hunyuanvideo15/encoders.py: captions as the pipeline encodes them, cached ragged and padded back to the
pipeline's masked embeddings; token counts read on the host; the clip's first latent frame is the image's (what the
image-to-video loss takes as its condition)."""

from __future__ import annotations

import torch

from dit_lora.contract.family import Components
from dit_lora.families.hunyuanvideo15.encoders import (
    LENGTHS_KEY,
    caption_token_counts,
    encode_captions,
    own_tokens,
    padded_prompt,
    pipeline_class,
    template_defaults,
)


def _comps(parts) -> Components:
    keys = ("text_encoder", "tokenizer", "text_encoder_2", "tokenizer_2")
    return Components(model=parts["transformer"], scheduler=None, encoders={k: parts[k] for k in keys})


def test_cached_captions_pad_back_to_the_pipelines_embeddings(hv15_components):
    captions = ["a red square", 'a blue circle moving right with the word "HELLO" on it']
    comps = _comps(hv15_components)
    cached = encode_captions(comps, captions, 300)
    lengths = cached[LENGTHS_KEY].tolist()
    assert lengths[0] < lengths[1] and cached["prompt_embeds"].shape[1] == lengths[1]  # cut to the longest
    defaults = template_defaults()
    with torch.no_grad():
        embeds, mask = pipeline_class()._get_mllm_prompt_embeds(
            comps.encoders["text_encoder"], comps.encoders["tokenizer"], captions, "cpu", tokenizer_max_length=300,
            **defaults,
        )  # fmt: skip
    assert mask.sum(1).tolist() == lengths == caption_token_counts(comps.encoders["tokenizer"], captions, 300)
    padded = padded_prompt(cached)
    n = lengths[1]
    assert torch.equal(padded["prompt_embeds_mask"], mask[:, :n])
    # every valid token is the pipeline's own; the padding is zero (the transformer masks and zeroes it anyway)
    torch.testing.assert_close(padded["prompt_embeds"] * mask[:, :n, None], embeds[:, :n] * mask[:, :n, None])
    assert cached["prompt_embeds_mask_2"][0].sum() == 0 and cached["prompt_embeds_mask_2"][1].sum() > 0  # quoted text


def test_own_tokens_zeroes_each_rows_padding():
    embeds = torch.ones(2, 6, 3)
    out = own_tokens(embeds, [2, 4])
    assert out.shape == (2, 4, 3) and out[0, 2:].abs().sum() == 0 and out[1].sum() == 12
    assert own_tokens(embeds, [0, 0]).shape == (2, 1, 3)  # never an empty sequence


def test_the_clips_first_latent_frame_is_the_images_latent(hv15_components):
    """The VAE is causal in time: encoding the first frame alone (as the image-to-video pipeline encodes its image)
    gives the clip's first latent frame."""
    vae = hv15_components["vae"]
    clip = torch.rand(1, 3, 9, 64, 64) * 2 - 1
    with torch.no_grad():
        whole = vae.encode(clip).latent_dist.mode()
        image = vae.encode(clip[:, :, :1]).latent_dist.mode()
    torch.testing.assert_close(whole[:, :, :1], image, rtol=1e-4, atol=1e-5)
