"""families/chroma/__init__.py: the Chroma package's registry entry and its factory, ``build_spec``."""

from __future__ import annotations

import pytest
from family_entries import check_entry

from dit_lora.families import chroma
from dit_lora.families.chroma.options import ChromaOptions


def test_entry_builds_a_new_spec_each_call_and_names_its_files():
    check_entry(chroma, {"chroma": "FamilySpec"})


def test_build_spec_builds_each_name_and_refuses_another():
    assert chroma.build_spec("chroma").name == "chroma"
    assert chroma.build_spec("chroma") is not chroma.build_spec("chroma")  # a new spec each call
    with pytest.raises(KeyError):
        chroma.ENTRY.build("not_chroma")  # the entry refuses a name it does not register


def test_the_entry_holds_its_options_classes():
    assert chroma.ENTRY.options_for("chroma") is ChromaOptions
