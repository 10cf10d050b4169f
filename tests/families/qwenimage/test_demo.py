"""families/qwenimage/demo.py: the tiny pipelines load offline in the stock pipelines and generate."""

from __future__ import annotations

import torch
from diffusers import QwenImagePipeline

from dit_lora.families.qwenimage.demo import build_tiny_qwen_tokenizer, build_tiny_qwenimage_pipeline, prompt_template


def test_tokenizer_keeps_the_template_tokens_and_special_tokens():
    tokenizer = build_tiny_qwen_tokenizer()
    ids = tokenizer(prompt_template(QwenImagePipeline).format("a red circle")).input_ids
    assert len(ids) > 34  # the pipeline drops its first 34 positions
    assert tokenizer.convert_ids_to_tokens(ids[0]) == "<|im_start|>"
    assert tokenizer.convert_tokens_to_ids("<|image_pad|>") != tokenizer.unk_token_id


def test_pipeline_folder_is_idempotent_and_generates(tiny_qwenimage):
    assert build_tiny_qwenimage_pipeline(tiny_qwenimage) == tiny_qwenimage  # same marker: untouched
    pipe = QwenImagePipeline.from_pretrained(tiny_qwenimage, torch_dtype=torch.float32)
    image = pipe("a red circle", height=32, width=32, num_inference_steps=2, output_type="np",
                 generator=torch.Generator().manual_seed(0)).images
    assert image.shape == (1, 32, 32, 3)
