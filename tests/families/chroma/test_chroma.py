"""families/chroma/__init__.py: the Chroma package's registry entry and its factory, ``build_spec``."""

from __future__ import annotations

from family_entries import check_entry

from dit_lora.families import chroma
from dit_lora.families.chroma.options import ChromaOptions


def test_entry_builds_each_name_anew_refuses_another_and_names_its_files_and_options():
    check_entry(
        chroma,
        {"chroma": "FamilySpec"},
        {"chroma": ChromaOptions},
    )
