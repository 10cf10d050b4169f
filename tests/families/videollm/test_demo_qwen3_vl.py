"""families/videollm/demo_qwen3_vl.py: the tiny Qwen3-VL config and template built offline (the written folder is
loaded and trained by tests/families/videollm/test_qwen3_vl.py and tests/e2e/test_qwen3_vl.py)."""

from __future__ import annotations

from dit_lora.families.videollm.demo_qwen import build_tiny_qwen_tokenizer
from dit_lora.families.videollm.demo_qwen3_vl import QWEN3_VL_CHAT_TEMPLATE, get_tiny_qwen3_vl_config


def test_the_template_has_no_default_system_turn_and_renders_the_video_placeholder():
    tokenizer = build_tiny_qwen_tokenizer()
    tokenizer.chat_template = QWEN3_VL_CHAT_TEMPLATE
    rendered = tokenizer.apply_chat_template(
        [{"role": "user", "content": [{"type": "video"}, {"type": "text", "text": "Hi"}]}], tokenize=False,
        add_generation_prompt=True)
    assert rendered == "<|im_start|>user\n<|vision_start|><|video_pad|><|vision_end|>Hi<|im_end|>\n<|im_start|>assistant\n"


def test_the_config_is_qwen3_vls_structure_at_a_small_size():
    tokenizer = build_tiny_qwen_tokenizer()
    config = get_tiny_qwen3_vl_config(tokenizer)
    assert config.text_config.model_type == "qwen3_vl_text" and config.vision_config.deepstack_visual_indexes == [0]
    assert config.video_token_id == tokenizer.convert_tokens_to_ids("<|video_pad|>")
    assert config.text_config.vocab_size >= len(tokenizer) and config.text_config.vocab_size % 64 == 0
    rope = config.text_config.rope_parameters
    assert sum(rope["mrope_section"]) == config.text_config.head_dim // 2 and rope["mrope_interleaved"]
