"""Chroma's encoders: captions encoded as ChromaPipeline.encode_prompt encodes them, its float mask made boolean (the
caption's tokens and its first padding token), the empty negative's beside them."""

from __future__ import annotations

import torch


def test_captions_are_encoded_as_the_pipeline_encodes_them_with_boolean_masks(tiny_chroma):
    from diffusers import ChromaPipeline

    from helpers import text_encoding

    from dit_lora.registry import get_spec

    captions = ["a red circle on a blue background", "two green squares"]
    comps, _ = text_encoding("chroma", tiny_chroma, max_sequence_length=24)
    got = get_spec("chroma").encoders.encode_prompts(comps, captions, with_negative=True)
    assert set(got) == {"prompt_embeds", "prompt_attention_mask", "negative_prompt_embeds",
                        "negative_prompt_attention_mask"}
    pipe = ChromaPipeline.from_pretrained(tiny_chroma, torch_dtype=torch.float32)
    embeds, _, mask, negative, _, negative_mask = pipe.encode_prompt(captions, negative_prompt="",
                                                                     max_sequence_length=24)
    assert got["prompt_embeds"].shape == (2, 24, 32) and got["prompt_attention_mask"].dtype == torch.bool
    torch.testing.assert_close(got["prompt_embeds"], embeds)
    torch.testing.assert_close(got["negative_prompt_embeds"], negative)
    assert torch.equal(got["prompt_attention_mask"], mask > 0)
    assert torch.equal(got["negative_prompt_attention_mask"], negative_mask > 0)
    tokens = pipe.tokenizer(captions, padding="max_length", max_length=24, truncation=True).attention_mask
    # every real token and the first padding token
    assert got["prompt_attention_mask"].sum(1).tolist() == [sum(row) + 1 for row in tokens]
