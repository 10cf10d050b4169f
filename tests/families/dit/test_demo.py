"""families/dit/demo.py: the tiny class-conditional DiT pipeline (laid out like facebook/DiT-XL-2-256) and the
DiT demo's data folder."""

from __future__ import annotations

import json

import pytest
import torch
from PIL import Image

from dit_lora.families.dit.demo import build_tiny_dit_components, build_tiny_dit_pipeline, get_tiny_dit_config


def test_the_tiny_folder_looks_like_the_published_repo(tiny_dit):
    index = json.loads((tiny_dit / "model_index.json").read_text())
    transformer = json.loads((tiny_dit / "transformer" / "config.json").read_text())
    assert index["_class_name"] == "DiTPipeline" and index["transformer"] == ["diffusers", "Transformer2DModel"]
    n = transformer["num_embeds_ada_norm"]
    assert transformer["_class_name"] == "Transformer2DModel" and len(index["id2label"]) == n == 1000
    assert index["id2label"]["7"] == "imagenet class 7"
    assert transformer["out_channels"] == 2 * transformer["in_channels"]  # learned sigma
    assert sorted(p.name for p in (tiny_dit / "transformer").glob("*.safetensors"))


def test_building_again_reuses_the_folder(tiny_dit):
    before = {p: p.stat().st_mtime_ns for p in tiny_dit.rglob("*.safetensors")}
    assert build_tiny_dit_pipeline(tiny_dit) == tiny_dit
    assert {p: p.stat().st_mtime_ns for p in tiny_dit.rglob("*.safetensors")} == before


def test_components_are_seeded_and_leave_the_global_rng_alone():
    state = torch.random.get_rng_state()
    first, again = build_tiny_dit_components(seed=3), build_tiny_dit_components(seed=3)
    assert torch.equal(torch.random.get_rng_state(), state)
    for (name, a), b in zip(first["transformer"].state_dict().items(), again["transformer"].state_dict().values()):
        assert torch.equal(a, b), name
    assert first["vae"].config.scaling_factor == again["vae"].config.scaling_factor > 0
    other = build_tiny_dit_components(seed=4)["transformer"].state_dict()
    assert any(not torch.equal(a, other[k]) for k, a in first["transformer"].state_dict().items())


def test_configs_are_copies_and_unknown_sizes_are_refused():
    config = get_tiny_dit_config()
    config["transformer"]["num_layers"] = 99
    assert get_tiny_dit_config()["transformer"]["num_layers"] != 99
    with pytest.raises(ValueError, match="unknown tiny DiT size .huge.; choose from tiny, small"):
        get_tiny_dit_config("huge")


def _demo_cfg(tmp_path, **kw):
    from dit_lora.config import TrainConfig

    values = dict(family="sana", demo=True, pretrained_model_name_or_path=str(tmp_path / "tiny-sana"),
                  train_data_dir=str(tmp_path / "shapes"), output_dir=str(tmp_path / "out"), resolution=64)
    values.update(kw)
    return TrainConfig.for_family(**values)


def test_dit_demo_trains_on_a_custom_data_folder_as_it_is(tmp_path, monkeypatch):
    from dit_lora.families.dit import demo as tiny_dit
    from dit_lora.registry import get_family

    monkeypatch.setattr(tiny_dit, "build_tiny_dit_pipeline", lambda path, **k: None)
    data = tmp_path / "mine" / "cat"
    data.mkdir(parents=True)
    Image.new("RGB", (32, 32)).save(data / "0.png")
    get_family("dit").demo.prepare_demo(_demo_cfg(tmp_path, family="dit", train_data_dir=str(tmp_path / "mine")))
    assert [p.name for p in (tmp_path / "mine").iterdir()] == ["cat"]
