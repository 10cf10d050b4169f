"""families/videollm/processing.py: a model's processing read from its folder without the weights, and what it
turns a clip and a conversation into."""

from __future__ import annotations

import numpy as np
import pytest

from dit_lora.config import TrainConfig
from dit_lora.families.videollm.processing import DEFAULT_MAX_LENGTH, QAProcessingLoader, VideoQAProcessing, max_tokens
from dit_lora.families.videollm.llava_next_video import LlavaNextVideoSpec
from dit_lora.registry import get_family


def test_max_tokens_is_the_option_else_the_default():
    assert max_tokens(TrainConfig.for_family(family="qwen2_5_vl")) == DEFAULT_MAX_LENGTH
    assert max_tokens(TrainConfig.for_family(family="qwen2_5_vl", max_sequence_length=96)) == 96


def test_the_video_qa_component_loads_the_processing_of_a_folder(tiny_path):
    loader = get_family("llava_next_video").video_qa
    assert isinstance(loader, QAProcessingLoader)
    processing = loader.load_processing(str(tiny_path))
    assert isinstance(processing, VideoQAProcessing) and processing.spec is loader.arch
    assert processing.pad_token_id is not None
    frames = np.zeros((4, 32, 32, 3), dtype=np.uint8)
    pixels, count = processing.frame_inputs(frames)
    assert pixels and count > 0
    messages = [{"role": "user", "content": "What colour?"}, {"role": "assistant", "content": "red"}]
    example = processing.tokenize(messages, count, None)
    video_id = processing.tokenizer.convert_tokens_to_ids(LlavaNextVideoSpec.video_token)
    assert int((example["input_ids"] == video_id).sum()) == count
    with pytest.raises(ValueError, match="--max_sequence_length"):
        processing.tokenize(messages, count, count)
