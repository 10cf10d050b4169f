"""The run config resolved once: parse, the catalogue's defaults as values (a new frozen config), the family's
checks, before any Accelerator exists."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest

from dit_lora.catalogue import by_hub_id
from dit_lora.config import TrainConfig
from dit_lora.config.schema import LoraOptions
from dit_lora.core.errors import UserError
from dit_lora.setup.resolve import Resolved, resolve

HUB_ID = "facebook/DiT-XL-2-512"


def _layout(root: Path) -> Path:
    """A folder with the catalogued release's configs (no weights: defaults are decided from configs alone)."""
    folder = root / "dit"
    for file, config in by_hub_id(HUB_ID).configs.items():
        (folder / file).parent.mkdir(parents=True, exist_ok=True)
        (folder / file).write_text(json.dumps(config))
    return folder


def _no_accelerator(monkeypatch):
    import accelerate

    def refuse(*args, **kwargs):
        raise AssertionError("resolve built an Accelerator")

    monkeypatch.setattr(accelerate, "Accelerator", refuse)


def test_a_command_line_resolves_to_a_frozen_config_with_the_catalogues_defaults(tmp_path, monkeypatch):
    _no_accelerator(monkeypatch)
    folder = _layout(tmp_path)
    resolved = resolve(["--family", "dit", "--pretrained_model_name_or_path", str(folder),
                        "--train_data_dir", str(folder), "--rank", "8"])
    assert isinstance(resolved, Resolved) and resolved.spec.name == "dit"
    cfg, entry = resolved.config, by_hub_id(HUB_ID)
    assert resolved.defaults.entry is entry
    assert cfg.explicit == frozenset({"family", "pretrained_model_name_or_path", "train_data_dir", "rank"})
    assert cfg.lora.rank == cfg.lora.rank == 8  # the user's value wins
    for name, value in entry.defaults.items():
        if name not in cfg.explicit and name != "lora_alpha":
            assert cfg.option(name) == value, name
    with pytest.raises(dataclasses.FrozenInstanceError):
        cfg.lora.rank = 4  # type: ignore[misc]


def test_the_defaults_are_returned_not_written_into_the_parsed_config(tmp_path):
    folder = _layout(tmp_path)
    parsed = TrainConfig.for_family("dit", pretrained_model_name_or_path=str(folder), train_data_dir=str(folder),
                                    explicit=frozenset({"pretrained_model_name_or_path", "train_data_dir"}))
    resolved = resolve(parsed)
    assert resolved.defaults.applied and parsed == TrainConfig.for_family(
        "dit", pretrained_model_name_or_path=str(folder), train_data_dir=str(folder))
    assert resolved.config != parsed
    assert {name: resolved.config.option(name) for name in resolved.defaults.applied} == {
        name: value for name, (value, _) in resolved.defaults.applied.items()}


def test_the_familys_checks_run_in_resolve(tmp_path):
    folder = _layout(tmp_path)
    cfg = TrainConfig.for_family("dit", pretrained_model_name_or_path=str(folder), train_data_dir=str(folder),
                                 caption_dropout_probability=0.1)
    with pytest.raises(UserError, match="class labels"):
        resolve(cfg)
    assert resolve(cfg, validate=False).config.data.caption_dropout_probability == 0.1


def test_blocks_to_swap_is_checked_against_the_models_block_count_from_its_config(tmp_path):
    folder = _layout(tmp_path)  # DiT-XL/2: 28 blocks in transformer/config.json
    values = dict(pretrained_model_name_or_path=str(folder), train_data_dir=str(folder))
    with pytest.raises(UserError, match="--blocks_to_swap 28 asks for all of the model's 28 blocks.*at most "
                       "--blocks_to_swap 27"):
        resolve(TrainConfig.for_family("dit", blocks_to_swap=28, **values))
    assert resolve(TrainConfig.for_family("dit", blocks_to_swap=27, **values)).config.performance.blocks_to_swap == 27
    with pytest.raises(UserError, match="cannot run with --compile blocks"):
        resolve(TrainConfig.for_family("dit", blocks_to_swap=2, compile="blocks", **values))


def test_a_negative_blocks_to_swap_is_refused_while_parsing(tmp_path):
    from dit_lora.config import parse_config

    with pytest.raises(UserError, match="--blocks_to_swap"):
        parse_config(["--family", "dit", "--train_data_dir", str(tmp_path), "--blocks_to_swap", "-1"])


def test_sections_and_flat_names_build_the_same_config():
    by_section = TrainConfig(lora=LoraOptions(rank=8, lora_layers=["to_q,to_k"]))
    flat = TrainConfig(rank=8, lora_layers=["to_q", "to_k"])
    assert by_section == flat and flat.lora.lora_layers == ["to_q", "to_k"]
    assert dataclasses.replace(flat, learning_rate=1e-3).training.learning_rate == 1e-3
    with pytest.raises(TypeError, match="no_such_option"):
        TrainConfig(no_such_option=1)


def test_a_swap_a_run_refuses_is_refused_for_the_plan_too():
    """`dit-lora plan` resolves without the run's checks (no data), but a --blocks_to_swap a run refuses (an nf4 base:
    bitsandbytes' weights cannot be swapped) is refused there too, rather than planned for no run."""
    cfg = TrainConfig.for_family(
        "sana", pretrained_model_name_or_path="Efficient-Large-Model/Sana_600M_1024px_diffusers",
        train_data_dir="unused", blocks_to_swap=2, quantize_base="nf4",
    )
    with pytest.raises(UserError, match="cannot swap a --quantize_base nf4 model"):
        resolve(cfg, build_demo=False, validate=False)
