"""families/videollm/demo_internvl.py: the tiny InternVL3.5 tokenizer and config built offline (the written folder is
loaded and trained by tests/families/videollm/test_internvl.py and tests/e2e/test_internvl.py)."""

from __future__ import annotations

from dit_lora.families.videollm.demo_internvl import (
    INTERNVL_ADDED_TOKENS,
    build_tiny_internvl_tokenizer,
    get_tiny_internvl_config,
)


def test_the_tokenizer_names_what_internvls_processor_reads_and_is_deterministic():
    tokenizer = build_tiny_internvl_tokenizer()
    ids = tokenizer.convert_tokens_to_ids(list(INTERNVL_ADDED_TOKENS))
    assert ids == sorted(ids) and ids[0] > tokenizer.convert_tokens_to_ids("<|video_pad|>")  # after Qwen's, in order
    assert (tokenizer.start_image_token, tokenizer.end_image_token) == ("<img>", "</img>")
    assert (tokenizer.context_image_token, tokenizer.video_token) == ("<IMG_CONTEXT>", "<video>")
    assert tokenizer("<img><IMG_CONTEXT></img>")["input_ids"] == [ids[0], ids[2], ids[1]]  # never split
    text = "Frame1: a red square moves left to right"
    assert build_tiny_internvl_tokenizer()(text)["input_ids"] == tokenizer(text)["input_ids"]
    rendered = tokenizer.apply_chat_template(
        [{"role": "user", "content": [{"type": "video"}, {"type": "text", "text": "Hi"}]}], tokenize=False,
        add_generation_prompt=True)
    assert rendered == "<|im_start|>user\n<video>\nHi<|im_end|>\n<|im_start|>assistant\n"  # no default system turn


def test_the_config_is_internvls_structure_at_a_small_size():
    tokenizer = build_tiny_internvl_tokenizer()
    config = get_tiny_internvl_config(tokenizer)
    assert config.text_config.model_type == "qwen3" and config.vision_config.model_type == "internvl_vision"
    assert config.image_token_id == tokenizer.convert_tokens_to_ids("<IMG_CONTEXT>")
    assert config.text_config.vocab_size >= len(tokenizer) and config.text_config.vocab_size % 64 == 0
    grid = config.vision_config.image_size[0] // config.vision_config.patch_size[0]
    assert config.image_seq_length == (grid // 2) ** 2 == 4  # the pixel shuffle halves each side
