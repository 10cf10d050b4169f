"""families/qwenimage/__init__.py: the registry entry."""

from __future__ import annotations

from dit_lora.families.qwenimage import ENTRY
from dit_lora.registry import recipe_script


def test_entry_builds_the_spec_and_names_its_recipe():
    assert "qwenimage" in ENTRY.names and ENTRY.build("qwenimage").name == "qwenimage"
    assert recipe_script("qwenimage") == "recipes/qwenimage_lora.py"
    assert ENTRY.demo_configs == ("qwenimage/demo.yaml", "qwenimage/edit_demo.yaml")
    assert ENTRY.docs == "docs/guides/qwenimage.md"
