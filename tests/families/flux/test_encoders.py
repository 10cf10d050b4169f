"""FLUX.1's encoders: captions encoded as FluxPipeline.encode_prompt encodes them."""

from __future__ import annotations

import torch


def test_captions_are_encoded_as_the_pipeline_encodes_them(tiny_flux):
    """T5's hidden states at the run's caption length and CLIP's pooled output, equal to FluxPipeline.encode_prompt."""
    from diffusers import FluxPipeline

    from helpers import text_encoding

    captions = ["a red circle on a blue background", "two green squares"]
    from dit_lora.registry import get_spec

    comps, _ = text_encoding("flux", tiny_flux, max_sequence_length=24)
    got = get_spec("flux").encoders.encode_prompts(comps, captions)
    pipe = FluxPipeline.from_pretrained(tiny_flux, torch_dtype=torch.float32)
    embeds, pooled, _ = pipe.encode_prompt(captions, prompt_2=None, max_sequence_length=24)
    assert got["prompt_embeds"].shape == (2, 24, 32)
    torch.testing.assert_close(got["prompt_embeds"].float(), embeds.float())
    torch.testing.assert_close(got["pooled_prompt_embeds"].float(), pooled.float())
