"""families/krea2/__init__.py: the Krea 2 package's registry entry and its factory, ``build_spec``."""

from __future__ import annotations

from family_entries import check_entry

from dit_lora.families import krea2
from dit_lora.families.krea2.options import Krea2Options


def test_entry_builds_each_name_anew_refuses_another_and_names_its_files_and_options():
    check_entry(
        krea2,
        {"krea2": "FamilySpec"},
        {"krea2": Krea2Options},
    )
