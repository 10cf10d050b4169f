"""families/zimage/demo.py: the tiny random Z-Image pipeline the demo and the tests train (offline), in the
Hub's layout, with Qwen3's chat template and the FLUX.1 VAE's latent statistics."""

from __future__ import annotations

import json

from diffusers import ZImagePipeline

from dit_lora.families.zimage.demo import (
    QWEN3_CHAT_TEMPLATE,
    build_tiny_qwen3_tokenizer,
    build_tiny_zimage_pipeline,
    get_tiny_zimage_config,
)


def test_the_tokenizer_has_qwen3s_template_and_tokens():
    tokenizer = build_tiny_qwen3_tokenizer()
    assert type(tokenizer).__name__.startswith("Qwen2Tokenizer") and tokenizer.chat_template == QWEN3_CHAT_TEMPLATE
    assert tokenizer.pad_token == "<|endoftext|>" and tokenizer.eos_token == "<|im_end|>"
    assert tokenizer.padding_side == "right"
    messages = [{"role": "user", "content": "a cat"}]
    off = tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True, enable_thinking=False)
    assert off.endswith("<|im_start|>assistant\n<think>\n\n</think>\n\n")
    ids = tokenizer("<|im_start|>user\na red circle<|im_end|>").input_ids
    assert ids[0] == tokenizer.convert_tokens_to_ids("<|im_start|>") and len(ids) < 12
    assert tokenizer.decode(tokenizer("an unknown wörd").input_ids) == "an unknown wörd"


def test_the_pipeline_is_built_once_in_the_hub_layout(tmp_path):
    path = build_tiny_zimage_pipeline(tmp_path / "tiny")
    index = json.loads((path / "model_index.json").read_text())
    assert index["_class_name"] == "ZImagePipeline" and index["text_encoder"] == ["transformers", "Qwen3Model"]
    stamp = (path / "transformer").stat().st_mtime_ns
    build_tiny_zimage_pipeline(tmp_path / "tiny")
    assert (path / "transformer").stat().st_mtime_ns == stamp  # the marker matched: nothing rebuilt
    pipe = ZImagePipeline.from_pretrained(path)
    config = get_tiny_zimage_config()
    assert pipe.transformer.config.cap_feat_dim == pipe.text_encoder.config.hidden_size == 48
    assert pipe.vae.config.shift_factor != 0 and pipe.vae.config.latent_channels == config["transformer"]["in_channels"]
    assert pipe.scheduler.config.shift == 3.0 and not pipe.scheduler.config.use_dynamic_shifting
