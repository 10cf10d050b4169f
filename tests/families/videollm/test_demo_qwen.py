"""families/videollm/demo_qwen.py: the tiny Qwen2-style tokenizer and model config built offline.

The written checkpoint (layout, determinism, reuse) is pinned in tests/families/videollm/test_qwen2_5_vl.py
(``test_tiny_checkpoint_layout_and_determinism``), next to the spec tests that load it.
"""

from __future__ import annotations

import pytest

from dit_lora.families.videollm.demo_qwen import (
    QWEN_SPECIAL_TOKENS,
    build_tiny_qwen_tokenizer,
    get_tiny_qwen2_5_vl_config,
)


@pytest.fixture(scope="module")
def tokenizer():
    return build_tiny_qwen_tokenizer()


def test_the_tokenizer_is_byte_level_and_deterministic(tokenizer):
    text = "A red square moves left to right. Ünïcode 123 ✓"
    ids = tokenizer(text).input_ids
    assert tokenizer.decode(ids) == text  # byte-level: any text round-trips
    assert len(ids) < len(text.encode())  # merges were learned
    assert build_tiny_qwen_tokenizer()(text).input_ids == ids
    assert tokenizer.decode([ord("A"), ord(" "), ord("z")]) == "A z"  # ids 0-255 are the bytes, in byte order


def test_special_tokens_are_never_split_and_skipped_on_decode(tokenizer):
    for token in QWEN_SPECIAL_TOKENS:
        assert len(tokenizer(token).input_ids) == 1, token
    ids = tokenizer("<|im_start|>user\nhi<|im_end|>").input_ids
    assert tokenizer.decode(ids, skip_special_tokens=True) == "user\nhi"
    assert tokenizer.eos_token == "<|im_end|>" and tokenizer.pad_token == "<|endoftext|>" and tokenizer.bos_token is None
    assert tokenizer.chat_template


def test_the_config_takes_its_token_ids_from_the_tokenizer(tokenizer):
    config = get_tiny_qwen2_5_vl_config(tokenizer)
    assert config.video_token_id == tokenizer.convert_tokens_to_ids("<|video_pad|>")
    assert config.vision_start_token_id == tokenizer.convert_tokens_to_ids("<|vision_start|>")
    assert config.text_config.vocab_size % 64 == 0 and config.text_config.vocab_size >= len(tokenizer)
    assert config.text_config.eos_token_id == tokenizer.eos_token_id
    assert config.vision_config.out_hidden_size == config.text_config.hidden_size
