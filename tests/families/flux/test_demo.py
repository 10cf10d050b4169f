"""FLUX.1's tiny pipeline: CLIP's tokenizer at 77 tokens whose vocabulary still encodes unseen words and punctuation,
T5's beside it, and the VAE's shift and scale measured (not the config's defaults)."""

from __future__ import annotations


def test_the_tiny_components():
    from dit_lora.families.flux.demo import build_tiny_flux_components

    parts = build_tiny_flux_components()
    clip, t5 = parts["tokenizer"], parts["tokenizer_2"]
    assert clip.model_max_length == 77
    ids = clip("A red circle, Zebra!").input_ids
    assert clip.unk_token_id not in ids[1:-1] and ids[-1] == clip.eos_token_id
    assert parts["text_encoder"].config.eos_token_id == clip.eos_token_id
    assert t5("a red circle").input_ids[-1] == t5.eos_token_id
    vae = parts["vae"].config
    assert vae.scaling_factor != 1.0 and vae.shift_factor != 0.0
    assert parts["transformer"].config.guidance_embeds
