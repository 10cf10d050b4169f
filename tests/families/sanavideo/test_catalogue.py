"""families/sanavideo/catalogue.py: the 2B 480p release is one entry for both tasks, found by its configs' content
(a reduced-depth copy included), with the trained size and rate."""

from __future__ import annotations

from real_layout import write_configs
from sanavideo_layout import HUB_ID

from dit_lora.catalogue import by_hub_id, entries, match
from dit_lora.catalogue.defaults import config_reader
from dit_lora.config import TrainConfig


def test_one_entry_for_both_tasks_matched_by_content(tmp_path):
    entry = by_hub_id(HUB_ID)
    assert entry.families == ("sanavideo", "sanavideo_i2v")
    assert entry in entries("sanavideo") and entry in entries("sanavideo_i2v")
    assert entry.trained == {"frames": 81, "height": 480, "width": 832, "fps": 16} and entry.text_length == 300
    folder = write_configs(HUB_ID, tmp_path / "copy", **{"transformer/config.json": {"num_layers": 2}})
    reader = config_reader(TrainConfig(pretrained_model_name_or_path=str(folder)).model)
    assert match("sanavideo", reader) is entry and match("sanavideo_i2v", reader) is entry
    assert match("sana", reader) is None and match("wan", reader) is None
    assert entry.configs["scheduler/scheduler_config.json"]["flow_shift"] == 8.0
    assert entry.configs["vae/config.json"]["z_dim"] == 16 and len(entry.configs["vae/config.json"]["latents_std"]) == 16
