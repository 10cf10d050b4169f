"""families/zimage/__init__.py: the registry entry (names, options, catalogue, demo, recipe, guide)."""

from dit_lora.families.zimage import ENTRY, make
from dit_lora.registry import recipe_script


def test_entry_and_factory():
    assert ENTRY.names == ("zimage", "z-image") and ENTRY.demo_configs == ("zimage/demo.yaml",)
    assert ENTRY.recipe_script == "recipes/zimage_lora.py" and recipe_script("z-image").endswith("zimage_lora.py")
    assert make("z-image").name == "z-image" and ENTRY.docs == "docs/guides/zimage.md"
