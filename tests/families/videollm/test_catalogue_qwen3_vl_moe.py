"""families/videollm/catalogue_qwen3_vl_moe.py: the MoE entries build transformers' Qwen3VLMoeConfig, count every
expert in the weights, and are told apart from each other and the dense Qwen3-VL by content."""

from __future__ import annotations

from dit_lora.families.videollm.catalogue import ENTRIES as ALL
from dit_lora.families.videollm.catalogue_qwen3_vl_moe import ENTRIES
from videollm_tiny import each_entry, entry_configs, others_matching


@each_entry(ENTRIES)
def test_each_entry_is_a_transformers_qwen3_vl_moe_config(entry):
    config, vision, text = entry_configs(entry, "Qwen3VLMoeConfig")
    assert text.model_type == "qwen3_vl_moe_text" and vision.out_hidden_size == text.hidden_size
    assert (text.num_experts, text.num_experts_per_tok, text.decoder_sparse_step) == (128, 8, 1)
    assert text.mlp_only_layers == [] and not config.tie_word_embeddings
    assert text.rope_parameters["mrope_section"] == [24, 20, 20] and vision.deepstack_visual_indexes == [8, 16, 24]
    assert entry in ALL and entry.family == "qwen3_vl_moe"
    assert others_matching(entry) == []


def test_the_30b_a3b_counts_all_its_experts_as_resident():
    """About 30.5B parameters stored (Qwen's model card), of which some 3B run per token."""
    text = ENTRIES[0].configs["config.json"]["text_config"]
    h, layers = text["hidden_size"], text["num_hidden_layers"]
    experts = layers * text["num_experts"] * 3 * h * text["moe_intermediate_size"]
    attention = layers * h * 128 * (2 * text["num_attention_heads"] + 2 * text["num_key_value_heads"])
    embeddings = 2 * text["vocab_size"] * h
    assert 29.5e9 < experts + attention + embeddings < 31e9
    active = experts * text["num_experts_per_tok"] // text["num_experts"] + attention + embeddings
    assert 2.5e9 < active < 3.5e9
