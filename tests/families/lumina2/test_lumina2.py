"""families/lumina2/__init__.py: the Lumina 2 package's registry entry and its factory, ``build_spec``."""

from __future__ import annotations

from family_entries import check_entry

from dit_lora.families import lumina2
from dit_lora.families.lumina2.options import Lumina2Options


def test_entry_builds_each_name_anew_refuses_another_and_names_its_files_and_options():
    check_entry(
        lumina2,
        {"lumina2": "FamilySpec"},
        {"lumina2": Lumina2Options},
    )
