"""families/sana/catalogue.py: the published Sana checkpoints agree with themselves and with Sana's rules.

(tests/catalogue/test_catalogue.py checks every family's entries against the libraries; these are Sana's own facts.)
"""

from __future__ import annotations

import pytest

from dit_lora.catalogue.entry import lookup
from dit_lora.families.sana.catalogue import ENTRIES


def reader(entry):
    """Reads ``entry``'s own published configs, as a model folder would give them."""
    return lambda sub, name: entry.configs.get(f"{sub}/{name}" if sub else name)


@pytest.mark.parametrize("entry", ENTRIES, ids=lambda e: e.hub_id)
def test_each_entry_matches_its_own_configs_and_sizes(entry):
    assert entry.family == "sana" and entry.hub_id.startswith("Efficient-Large-Model/")
    assert entry.matches(reader(entry))
    transformer = entry.configs["transformer/config.json"]
    # the DC-AE compresses 32x and Sana's patch size is 1: sample_size = px // 32
    assert transformer["sample_size"] * 32 == entry.trained["resolution"] == entry.defaults["resolution"]
    assert entry.text_length == 300  # diffusers' max_sequence_length for Sana
    assert entry.configs["scheduler/scheduler_config.json"]["flow_shift"] == (
        6.0 if entry.trained["resolution"] == 4096 else 3.0)
    assert entry.stored_dtype in ("fp16", "bf16")


def test_hub_ids_are_unique_and_a_changed_width_no_longer_matches():
    assert len({e.hub_id for e in ENTRIES}) == len(ENTRIES)
    entry = ENTRIES[0]
    configs = {k: dict(v) for k, v in entry.configs.items()}
    configs["transformer/config.json"]["num_attention_heads"] += 1
    assert not entry.matches(lambda sub, name: configs.get(f"{sub}/{name}"))
    assert lookup(configs["transformer/config.json"], "sample_size") == 16  # 512 px


def test_a_reduced_depth_copy_is_named_by_its_differences():
    entry = next(e for e in ENTRIES if "600M_1024px" in e.hub_id)
    configs = {k: dict(v) for k, v in entry.configs.items()}
    configs["transformer/config.json"]["num_layers"] = 2
    read = lambda sub, name: configs.get(f"{sub}/{name}")  # noqa: E731
    assert entry.matches(read)  # still Sana 600M: it keeps the entry's defaults
    assert entry.depth_differences(read) == ["num_layers 2 (published: 28)"]
