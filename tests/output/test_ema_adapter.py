"""The EMA adapter's files: beside the adapter for a diffusers-format family, in ``ema/`` for a PEFT folder, folded
and finite-checked as the adapter, found by the Hub push and presented under the adapter's names for loaders."""

from __future__ import annotations

import pytest
import torch
from safetensors.torch import load_file

from dit_lora.output.adapter import NonFiniteWeightsError
from dit_lora.output.ema_adapter import ema_name, ema_view, remove_stale_ema, write_ema_adapter
from dit_lora.output.hub import select_files
from dit_lora.registry import get_spec

KEY = "transformer_blocks.0.attn1.to_q"
CONFIG = {"r": 2, "lora_alpha": 4, "target_modules": ["to_q"], "use_rslora": False}


def _lora(value: float = 1.0) -> dict:
    return {f"{KEY}.lora_A.weight": torch.full((2, 8), value), f"{KEY}.lora_B.weight": torch.full((8, 2), value)}


def test_a_diffusers_family_writes_its_ema_file_beside_the_adapter(tmp_path):
    written = write_ema_adapter(get_spec("sana"), tmp_path, _lora(0.5), CONFIG, {}, [])
    assert ema_name("pytorch_lora_weights.safetensors") == "pytorch_lora_weights_ema.safetensors"
    assert written == [tmp_path / "pytorch_lora_weights_ema.safetensors"]
    state = load_file(str(written[0]))
    # diffusers' key layout, and the strength alpha / r = 2 folded into lora_B as in the adapter
    assert torch.equal(state[f"transformer.{KEY}.lora_B.weight"], torch.full((8, 2), 1.0))
    assert torch.equal(state[f"transformer.{KEY}.lora_A.weight"], torch.full((2, 8), 0.5))
    assert sorted(p.name for p in tmp_path.iterdir()) == ["pytorch_lora_weights_ema.safetensors"]  # no staging left
    (tmp_path / "pytorch_lora_weights.safetensors").write_bytes(written[0].read_bytes())
    assert "pytorch_lora_weights_ema.safetensors" in select_files(tmp_path)
    with ema_view(tmp_path) as view:
        assert [p.name for p in view.iterdir()] == ["pytorch_lora_weights.safetensors"]
        assert load_file(str(view / "pytorch_lora_weights.safetensors")).keys() == state.keys()
    assert not view.exists()


def test_a_peft_family_writes_an_ema_folder(tmp_path):
    written = write_ema_adapter(get_spec("dit"), tmp_path, _lora(), CONFIG, {}, [])
    assert sorted(p.relative_to(tmp_path).as_posix() for p in written) == [
        "ema/adapter_config.json",
        "ema/adapter_model.safetensors",
    ]
    for name in ("adapter_model.safetensors", "adapter_config.json"):
        (tmp_path / name).write_bytes((tmp_path / "ema" / name).read_bytes())
    assert {"ema/adapter_model.safetensors", "ema/adapter_config.json"} <= set(select_files(tmp_path))
    with ema_view(tmp_path) as view:
        assert view == tmp_path / "ema"
    # PEFT's own loader reads the folder as a subfolder of the run, at the folded strength
    from peft import PeftModel

    base = torch.nn.Module()
    block = torch.nn.Module()
    block.attn1 = torch.nn.Module()
    block.attn1.to_q = torch.nn.Linear(8, 8, bias=False)
    base.transformer_blocks = torch.nn.ModuleList([block])
    loaded = PeftModel.from_pretrained(base, str(tmp_path), subfolder="ema")
    layer = loaded.base_model.model.transformer_blocks[0].attn1.to_q
    assert torch.equal(layer.lora_B["default"].weight, torch.full((8, 2), 2.0)) and layer.scaling["default"] == 1.0


def test_a_non_finite_ema_is_never_written(tmp_path):
    with pytest.raises(NonFiniteWeightsError):
        write_ema_adapter(get_spec("sana"), tmp_path, _lora(float("nan")), CONFIG, {}, [])
    assert list(tmp_path.iterdir()) == []


def test_a_run_without_ema_removes_an_earlier_runs_ema_files_only(tmp_path):
    """An overwritten run's EMA adapter would otherwise be pushed and loaded beside another run's adapter."""
    write_ema_adapter(get_spec("sana"), tmp_path, _lora(), CONFIG, {}, [])
    write_ema_adapter(get_spec("dit"), tmp_path, _lora(), CONFIG, {}, [])
    (tmp_path / "ema" / "notes.txt").write_text("mine")
    (tmp_path / "other_ema.safetensors").write_bytes(b"mine")
    removed = remove_stale_ema(tmp_path, ["pytorch_lora_weights.safetensors", "adapter_model.safetensors"])
    assert sorted(p.relative_to(tmp_path).as_posix() for p in removed) == [
        "ema/adapter_model.safetensors",
        "pytorch_lora_weights_ema.safetensors",
    ]
    assert sorted(p.name for p in (tmp_path / "ema").iterdir()) == ["adapter_config.json", "notes.txt"]
    assert (tmp_path / "other_ema.safetensors").is_file()
