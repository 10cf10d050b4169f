"""families/hunyuanvideo15/__init__.py: the HunyuanVideo 1.5 package's registry entry and its factory, ``build_spec``."""

from __future__ import annotations

from family_entries import check_entry

from dit_lora.families import hunyuanvideo15
from dit_lora.families.hunyuanvideo15.options import HunyuanVideo15I2VOptions, HunyuanVideo15Options


def test_entry_builds_each_name_anew_refuses_another_and_names_its_files_and_options():
    check_entry(
        hunyuanvideo15,
        {"hunyuanvideo15": "FamilySpec", "hunyuanvideo15_i2v": "FamilySpec"},
        {"hunyuanvideo15": HunyuanVideo15Options, "hunyuanvideo15_i2v": HunyuanVideo15I2VOptions},
    )
