"""families/hunyuanvideo15/info.py: what the published configs say (the catalogue's copies), the trained size of
each target size, and the task's mode line."""

from __future__ import annotations

import pytest

from dit_lora.config import TrainConfig
from dit_lora.families.hunyuanvideo15.info import SIZES, TRAINED, HunyuanVideo15Task, read_info


@pytest.mark.parametrize(
    ("hub_id", "size", "shift"),
    [("480p_t2v", (480, 848), 5.0), ("720p_t2v", (720, 1280), 9.0), ("720p_i2v", (720, 1280), 7.0)],
)
def test_each_published_checkpoint_reads_its_geometry_size_and_shift(hub_id, size, shift):
    family = "hunyuanvideo15_i2v" if "i2v" in hub_id else "hunyuanvideo15"
    cfg = TrainConfig.for_family(
        family, pretrained_model_name_or_path=f"hunyuanvideo-community/HunyuanVideo-1.5-Diffusers-{hub_id}"
    )
    info = read_info(cfg.model)
    assert (info.z_dim, info.vae_spatial, info.vae_temporal, info.patch) == (32, 16, 4, (1, 1, 1))
    assert info.trained_size() == (TRAINED["frames"], *size) and info.scheduler_shift == shift
    assert info.layers == 54 and not info.meanflow and info.size_multiple == 16
    assert "54 blocks" in info.describe()


def test_an_unknown_target_size_trains_at_480p_and_the_modes_say_the_task():
    assert SIZES[640] == (480, 848)
    t2v = HunyuanVideo15Task(name="hunyuanvideo15", task="t2v", pipeline_class_name="HunyuanVideo15Pipeline")
    i2v = HunyuanVideo15Task(name="hunyuanvideo15_i2v", task="i2v", pipeline_class_name="x")
    assert t2v.mode == "text-to-video" and "condition channels" in i2v.mode
