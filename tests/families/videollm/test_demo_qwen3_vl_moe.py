"""families/videollm/demo_qwen3_vl_moe.py: the tiny MoE config is the dense tiny Qwen3-VL's with every language-model
layer sparse (the built folder is loaded and trained by tests/families/videollm/test_qwen3_vl_moe.py and
tests/e2e/test_qwen3_vl_moe.py)."""

from __future__ import annotations

from dit_lora.families.videollm.demo_qwen import build_tiny_qwen_tokenizer
from dit_lora.families.videollm.demo_qwen3_vl import get_tiny_qwen3_vl_config
from dit_lora.families.videollm.demo_qwen3_vl_moe import get_tiny_qwen3_vl_moe_config


def test_the_config_is_the_dense_tiny_one_with_sparse_layers():
    tokenizer = build_tiny_qwen_tokenizer()
    moe, dense = get_tiny_qwen3_vl_moe_config(tokenizer), get_tiny_qwen3_vl_config(tokenizer)
    text = moe.text_config
    assert moe.model_type == "qwen3_vl_moe" and text.model_type == "qwen3_vl_moe_text"
    assert (text.num_experts, text.num_experts_per_tok, text.decoder_sparse_step, text.mlp_only_layers) == (4, 2, 1, [])
    assert not text.output_router_logits  # as published: no router loss unless asked
    for key in ("hidden_size", "num_hidden_layers", "num_attention_heads", "head_dim", "vocab_size", "rope_parameters"):
        assert getattr(text, key) == getattr(dense.text_config, key), key
    assert moe.vision_config.deepstack_visual_indexes == dense.vision_config.deepstack_visual_indexes == [0]
    assert moe.video_token_id == dense.video_token_id == tokenizer.convert_tokens_to_ids("<|video_pad|>")
