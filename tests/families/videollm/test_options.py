"""families/videollm/options.py: the video LLMs' flags, the same for every architecture."""

import pytest

from dit_lora.config import parse_config

MIN = ["--pretrained_model_name_or_path", "org/model", "--train_data_dir", "data"]


@pytest.mark.parametrize("family", ["llava_next_video", "qwen2_5_vl"])
def test_video_llm_flags(family):
    cfg = parse_config(MIN + ["--family", family, "--num_frames", "4", "--video_folder", "v", "--train_vision_tower",
                              "--vision_tower_learning_rate", "3e-6", "--validation_video", "c.mp4"])
    o = cfg.family_options
    assert (o.num_frames, o.video_folder, o.train_vision_tower, o.vision_tower_learning_rate, o.validation_video) == (
        4, "v", True, 3e-6, "c.mp4")
    assert o.use_liger_kernel is False
