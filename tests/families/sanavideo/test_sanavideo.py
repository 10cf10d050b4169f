"""families/sanavideo/__init__.py: the registry entry and its factory."""

from __future__ import annotations

from dit_lora.families.sanavideo import ENTRY


def test_entry_and_factory():
    assert ENTRY.names == ("sanavideo", "sanavideo_i2v") and ENTRY.recipe == "sanavideo_lora.py"
    assert ENTRY.demo_configs == ("sanavideo/demo.yaml", "sanavideo/i2v_demo.yaml")
    assert ENTRY.docs == "docs/guides/sana-video.md" and ENTRY.aliases == ("sana-video",)
    assert ENTRY.build("sanavideo_i2v").name == "sanavideo_i2v" and ENTRY.build("sanavideo") is not ENTRY.build("sanavideo")
