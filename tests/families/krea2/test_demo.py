"""Krea 2's tiny pipeline: a Qwen3-VL text encoder tapped at as many layers as the transformer fuses (saved in
model_index.json as the pipeline registers them), no guidance embedding, a VAE whose statistics are not 0 and 1."""

from __future__ import annotations

import json


def test_the_tiny_pipeline_taps_as_many_layers_as_its_transformer_fuses(tiny_krea2):
    from dit_lora.families.krea2.demo import build_tiny_krea2_components

    index = json.loads((tiny_krea2 / "model_index.json").read_text())
    assert index["_class_name"] == "Krea2Pipeline" and not index["is_distilled"]
    parts = build_tiny_krea2_components()
    config, text = parts["transformer"].config, parts["text_encoder"].config.text_config
    assert len(index["text_encoder_select_layers"]) == config.num_text_layers
    assert max(index["text_encoder_select_layers"]) <= text.num_hidden_layers  # index 0 is the embeddings
    assert config.text_hidden_dim == text.hidden_size and "guidance_embeds" not in config
    vae = parts["vae"].config
    assert any(m != 0 for m in vae.latents_mean) and any(s != 1 for s in vae.latents_std)
