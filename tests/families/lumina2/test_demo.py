"""Lumina 2's tiny pipeline: Gemma-2 and its tokenizer (the system prompt's words merged), grouped-query attention at
the real 3:1 ratio, an 8x VAE (Lumina2Pipeline assumes it) with its shift and scale measured."""

from __future__ import annotations


def test_the_tiny_components():
    from dit_lora.families.lumina2.demo import build_tiny_lumina2_components, latent_stride
    from dit_lora.families.lumina2.encoders import PROMPT_START, default_system_prompt

    parts = build_tiny_lumina2_components()
    assert set(parts) == {"transformer", "vae", "text_encoder", "tokenizer", "scheduler"}
    tokenizer = parts["tokenizer"]
    prefixed = tokenizer(default_system_prompt() + PROMPT_START + "a red circle").input_ids
    assert len(prefixed) < 48 and tokenizer.unk_token_id not in prefixed  # whole words: the demo's 64 tokens hold it
    vae, config = parts["vae"].config, parts["transformer"].config
    assert vae.scaling_factor != 1.0 and vae.shift_factor != 0.0 and latent_stride() == 16
    assert config.num_attention_heads == 3 * config.num_kv_heads and config.cap_feat_dim != config.hidden_size
    assert parts["text_encoder"].config.hidden_size == config.cap_feat_dim
    assert parts["scheduler"].config.shift == 6.0 and not parts["scheduler"].config.use_dynamic_shifting
