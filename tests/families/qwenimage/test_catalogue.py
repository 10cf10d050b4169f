"""families/qwenimage/catalogue.py: the published configs build their classes and carry the issue's facts."""

from __future__ import annotations

from dit_lora.catalogue import by_hub_id
from dit_lora.catalogue.files import catalogue_of

ENTRIES = catalogue_of("dit_lora.families.qwenimage").entries


def test_real_transformer_facts():
    entry = by_hub_id("Qwen/Qwen-Image")
    tr = entry.configs["transformer/config.json"]
    assert (tr["num_layers"], tr["num_attention_heads"], tr["attention_head_dim"], tr["joint_attention_dim"],
            tr["in_channels"], tr["axes_dims_rope"]) == (60, 24, 128, 3584, 64, [16, 56, 56])
    assert entry.defaults["resolution"] == 1328 and entry.text_length == 512
    sched = entry.configs["scheduler/scheduler_config.json"]
    assert sched["use_dynamic_shifting"] and (sched["base_shift"], sched["max_shift"]) == (0.5, 0.9)


def test_every_entry_is_a_qwenimage_family():
    assert {e.hub_id for e in ENTRIES} >= {"Qwen/Qwen-Image", "Qwen/Qwen-Image-2512"}
    assert all(e.family.startswith("qwenimage") for e in ENTRIES)
