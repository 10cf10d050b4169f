"""output/ema_layout.py: where a --use_ema run's EMA adapter is, and whether a finished run wrote one (the
names, the view and the stale-file removal are exercised with the writer in tests/output/test_ema_adapter.py)."""

from __future__ import annotations

from dit_lora.output.ema_layout import ema_files, ema_name, has_ema
from dit_lora.output.names import ADAPTER_INDEX_FILE

ADAPTER = "pytorch_lora_weights.safetensors"


def test_has_ema_finds_the_file_beside_the_folder_and_an_index(tmp_path):
    assert not has_ema(tmp_path, ADAPTER)
    (tmp_path / ADAPTER).write_bytes(b"x")
    (tmp_path / "pytorch_lora_weights_comfyui_ema.safetensors").write_bytes(b"x")  # an export's EMA: not the adapter
    assert not has_ema(tmp_path, ADAPTER)
    (tmp_path / ema_name(ADAPTER)).write_bytes(b"x")
    assert has_ema(tmp_path, ADAPTER)
    peft = tmp_path / "peft"
    (peft / "ema").mkdir(parents=True)
    assert not has_ema(peft, "adapter_model.safetensors")  # an empty ema/ is no EMA adapter
    (peft / "ema" / "adapter_model.safetensors").write_bytes(b"x")
    assert has_ema(peft, "adapter_model.safetensors")
    experts = tmp_path / "a14b"
    (experts / "ema").mkdir(parents=True)
    (experts / "ema" / ADAPTER_INDEX_FILE).write_text("{}")  # a low-noise-only run: its file has another name
    assert has_ema(experts, ADAPTER)


def test_ema_files_lists_both_places(tmp_path):
    assert ema_files(tmp_path, [ADAPTER, "adapter_config.json"]) == [
        tmp_path / "pytorch_lora_weights_ema.safetensors",
        tmp_path / "ema" / ADAPTER,
        tmp_path / "ema" / "adapter_config.json",
    ]
