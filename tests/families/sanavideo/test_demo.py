"""families/sanavideo/demo.py without building a pipeline (tests/e2e/test_sanavideo.py builds and loads one): the
tiny configs keep the published structure, each task gets the scheduler diffusers' conversion script writes, and
an unknown task or a folder the builder did not make is refused."""

from __future__ import annotations

import pytest

from dit_lora.catalogue import by_hub_id
from dit_lora.families.sanavideo.demo import (
    _scheduler,
    build_tiny_sanavideo_pipeline,
    get_tiny_sanavideo_config,
)


def test_tiny_configs_keep_the_published_structure():
    published = by_hub_id("Efficient-Large-Model/SANA-Video_2B_480p_diffusers").configs
    tiny = get_tiny_sanavideo_config()
    for key in ("in_channels", "patch_size", "sample_size", "qk_norm", "mlp_ratio", "attention_bias"):
        assert tiny["transformer"][key] == published["transformer/config.json"][key], key
    for key in ("z_dim", "dim_mult", "temperal_downsample"):
        assert tiny["vae"][key] == published["vae/config.json"][key], key
    assert tiny["transformer"]["caption_channels"] == tiny["text_encoder"]["hidden_size"]
    tiny["vae"]["dim_mult"].append(8)  # a fresh copy each call
    assert get_tiny_sanavideo_config()["vae"]["dim_mult"] == [1, 2, 4, 4]


def test_each_task_gets_the_conversion_scripts_scheduler():
    t2v, i2v = _scheduler("t2v"), _scheduler("i2v")
    assert type(t2v).__name__ == "DPMSolverMultistepScheduler" and t2v.config.flow_shift == 8.0
    assert t2v.config.use_flow_sigmas and t2v.config.prediction_type == "flow_prediction"
    assert type(i2v).__name__ == "FlowMatchEulerDiscreteScheduler" and i2v.config.shift == 8.0


def test_unknown_task_and_foreign_folder_are_refused(tmp_path):
    with pytest.raises(ValueError, match="unknown SANA-Video demo task 'x2v'"):
        build_tiny_sanavideo_pipeline(tmp_path / "x", task="x2v")
    mine = tmp_path / "mine"
    mine.mkdir()
    (mine / "weights.bin").write_text("x")
    with pytest.raises(FileExistsError):
        build_tiny_sanavideo_pipeline(mine)
