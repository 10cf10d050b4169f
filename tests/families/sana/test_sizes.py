"""Sana's size checks (review finding G) and its demo's checks before it builds anything (H); CogVideoX's sizes are
tests/families/cogvideox/test_info.py's, the DiT demo's tests/families/dit/test_demo.py's."""

from __future__ import annotations

import re
import types

import pytest
from PIL import Image

from dit_lora.core.errors import UserError

# The published Sana (DC-AE f32, patch 1) and the demo's tiny one (f8, patch 1).
REAL = ({"patch_size": 1}, {"encoder_block_out_channels": [128, 256, 512, 512, 1024, 1024]})


def _tiny():
    from dit_lora.families.sana.demo import get_tiny_sana_config

    config = get_tiny_sana_config("tiny")
    return config["transformer"], config["vae"]


def _suggested(message: str) -> list[int]:
    return [int(v) for v in re.search(r"Use (?:--resolution )?(\d+)(?: or (\d+))?\.", message).groups() if v]


@pytest.mark.parametrize("model", ["real", "tiny"])
@pytest.mark.parametrize("resolution", [7, 8, 33, 40, 100, 520, 1000])
def test_sana_suggested_resolutions_pass_the_pipelines_own_check(model, resolution):
    from diffusers import SanaPipeline

    from dit_lora.families.sana.model import check_resolution

    tr_cfg, vae_cfg = REAL if model == "real" else _tiny()
    with pytest.raises(UserError) as err:
        check_resolution(resolution, tr_cfg, vae_cfg)
    assert "--resolution" in str(err.value) and "SanaPipeline" in str(err.value)
    suggested = _suggested(str(err.value))
    assert suggested and all(abs(size - resolution) < 32 for size in suggested)
    pipe = types.SimpleNamespace(_callback_tensor_inputs=["latents"])
    for size in suggested:
        SanaPipeline.check_inputs(pipe, "a prompt", size, size)  # raises on a size the samples cannot take
        check_resolution(size, tr_cfg, vae_cfg)


def _demo_cfg(tmp_path, **kw):
    from dit_lora.config import TrainConfig

    values = dict(family="sana", demo=True, pretrained_model_name_or_path=str(tmp_path / "tiny-sana"),
                  train_data_dir=str(tmp_path / "shapes"), output_dir=str(tmp_path / "out"), resolution=64)
    values.update(kw)
    return TrainConfig.for_family(**values)


@pytest.fixture
def no_model_build(monkeypatch):
    """Building the tiny Sana is not what these tests judge: record the call instead."""
    from dit_lora.families.sana import demo as tiny_sana

    built = []
    monkeypatch.setattr(tiny_sana, "build_tiny_sana_pipeline", lambda path, **k: built.append(path))
    return built


@pytest.mark.parametrize("resolution,expected", [(7, "Use 32."), (100000, "outside what --demo is for"),
                                                 (40, "Use 32 or 64.")])
def test_sana_demo_checks_the_resolution_before_building_anything(tmp_path, no_model_build, resolution, expected):
    from dit_lora.registry import get_family

    cfg = _demo_cfg(tmp_path, resolution=resolution)
    with pytest.raises(UserError, match=re.escape(expected)):
        get_family("sana").demo.prepare_demo(cfg)
    assert not no_model_build and not (tmp_path / "shapes").exists()


def test_sana_demo_trains_on_a_custom_data_folder_as_it_is(tmp_path, no_model_build, capsys):
    from dit_lora.registry import get_family

    data = tmp_path / "mine"
    data.mkdir()
    for i in range(5):
        Image.new("RGB", (64, 64)).save(data / f"{i}.png")
    before = sorted(p.name for p in data.iterdir())
    get_family("sana").demo.prepare_demo(_demo_cfg(tmp_path, train_data_dir=str(data)))
    assert sorted(p.name for p in data.iterdir()) == before and no_model_build
    assert "already holds data; training on it as it is" in capsys.readouterr().out
    get_family("sana").demo.prepare_demo(_demo_cfg(tmp_path))  # a new folder still gets the shapes
    assert (tmp_path / "shapes" / "metadata.jsonl").is_file()
    (tmp_path / "file").write_text("x")
    with pytest.raises(UserError, match="--train_data_dir .* is a file"):
        get_family("sana").demo.prepare_demo(_demo_cfg(tmp_path, train_data_dir=str(tmp_path / "file")))
