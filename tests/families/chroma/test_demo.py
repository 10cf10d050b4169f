"""Chroma's tiny pipeline: T5's tokenizer and encoder only, no guidance embedding in the transformer, and the VAE's
shift and scale measured (not the config's defaults)."""

from __future__ import annotations


def test_the_tiny_components():
    from dit_lora.families.chroma.demo import build_tiny_chroma_components

    parts = build_tiny_chroma_components()
    assert set(parts) == {"transformer", "vae", "text_encoder", "tokenizer", "scheduler"}
    assert parts["tokenizer"]("a red circle").input_ids[-1] == parts["tokenizer"].eos_token_id
    vae = parts["vae"].config
    assert vae.scaling_factor != 1.0 and vae.shift_factor != 0.0
    config = parts["transformer"].config
    assert "guidance_embeds" not in config and config.joint_attention_dim == parts["text_encoder"].config.d_model
