"""families/cogvideox/sizes.py: the model info read once, the RoPE limit, the size flags named in messages, the clip
data path. The buckets and their checks on real layouts are in test_spec.py."""

from __future__ import annotations


from dit_lora.config import TrainConfig
from dit_lora.data.video_prepare import VideoMedia
from dit_lora.families.cogvideox.info import ModelInfo
from dit_lora.families.cogvideox.sizes import (
    CogVideoXData,
    CogVideoXVideo,
    cached_model_info,
    rope_limit,
    size_flags,
)
from dit_lora.registry import get_family
from config_stand_in import stand_in


def test_rope_limit_is_only_for_15s_sliced_table():
    assert rope_limit(ModelInfo(rope=True)) is None  # 1.0: RoPE crops a grid of any size
    assert rope_limit(ModelInfo(patch_size_t=2, rope=True, sample_height=300, sample_width=300)) == (2400, 2400)


def test_size_flags_name_what_the_user_set():
    cfg = stand_in(frame_buckets=None, height=64, width=None, max_num_frames=9)
    assert size_flags(cfg) == "--height/--max_num_frames"
    assert size_flags(stand_in(frame_buckets="9x64x64")) == "--frame_buckets"
    assert size_flags(stand_in(frame_buckets=None, height=None, width=None, max_num_frames=None)) == (
        "the defaults")


def test_model_info_is_read_once_and_the_data_path_decodes_clips():
    cfg = TrainConfig(family="cogvideox", pretrained_model_name_or_path="THUDM/CogVideoX-5b", train_data_dir="x")
    assert cached_model_info(cfg) is cached_model_info(cfg)
    assert CogVideoXVideo().model_fps(cfg) == 8
    spec = get_family("cogvideox")
    assert isinstance(CogVideoXData().data_handler(cfg, spec), VideoMedia)
