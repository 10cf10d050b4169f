"""families/sanavideo/info.py: what the published configs say (Wan VAE strides, patch, sampling shift, depth) and
the clip buckets: the trained 81 x 480 x 832 by default, the flags' size, and the frame and size rules refused in
one paragraph naming the nearest valid values."""

from __future__ import annotations

import pytest
from real_layout import write_configs
from sanavideo_layout import HUB_ID, sanavideo_cfg

from dit_lora.core.errors import UserError
from dit_lora.families.sanavideo.info import SanaVideoInfo, forget_infos, read_info
from dit_lora.families.sanavideo.spec import TASKS


@pytest.fixture
def folder(tmp_path):
    forget_infos()
    return write_configs(HUB_ID, tmp_path / "sv")


def test_the_published_configs(folder):
    info = read_info(sanavideo_cfg(pretrained_model_name_or_path=str(folder)).model)
    assert info == SanaVideoInfo(vae_class="AutoencoderKLWan", z_dim=16, vae_spatial=8, vae_temporal=4,
                                 patch=(1, 2, 2), sample_size=30, scheduler_shift=8.0, layers=20)
    assert info.size_multiple == 16 and info.trained_size() == (81, 480, 832)
    assert "20 blocks" in info.describe() and "AutoencoderKLWan" in info.describe()
    assert SanaVideoInfo(sample_size=22).trained_size() == (81, 720, 1280)


def test_buckets_default_to_the_trained_size_then_the_flags(folder):
    task = TASKS["sanavideo"]
    assert task.video_buckets(sanavideo_cfg(pretrained_model_name_or_path=str(folder)))[0] == (81, 480, 832)
    cfg = sanavideo_cfg(pretrained_model_name_or_path=str(folder), max_num_frames=9, height=64, width=96)
    assert task.video_buckets(cfg)[0] == (9, 64, 96) and task.model_fps(cfg.model) == 16
    pinned = sanavideo_cfg(pretrained_model_name_or_path=str(folder), frame_buckets="9x64x64,5x32x48")
    assert task.video_buckets(pinned) == [(9, 64, 64), (5, 32, 48)]


@pytest.mark.parametrize("values, message", [
    ({"max_num_frames": 10}, r"--max_num_frames 10 .* 4k\+1 .* Use 9 or 13"),
    ({"height": 70}, "--height 70 must be a multiple of 16 .*use 64"),
])
def test_sizes_the_model_cannot_take_are_refused(folder, values, message):
    cfg = sanavideo_cfg(pretrained_model_name_or_path=str(folder), **values)
    with pytest.raises(UserError, match=message):
        TASKS["sanavideo"].video_buckets(cfg)
