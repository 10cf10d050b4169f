"""families/ideogram4/__init__.py: the Ideogram 4 package's registry entry and its factory, ``build_spec``."""

from __future__ import annotations

from family_entries import check_entry

from dit_lora.families import ideogram4
from dit_lora.families.ideogram4.options import Ideogram4Options


def test_entry_builds_each_name_anew_refuses_another_and_names_its_files_and_options():
    check_entry(
        ideogram4,
        {"ideogram4": "FamilySpec"},
        {"ideogram4": Ideogram4Options},
    )
