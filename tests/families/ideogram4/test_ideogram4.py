"""families/ideogram4/__init__.py: the Ideogram 4 package's registry entry and its factory, ``build_spec``."""

from __future__ import annotations

import pytest
from family_entries import check_entry

from dit_lora.families import ideogram4
from dit_lora.families.ideogram4.options import Ideogram4Options


def test_entry_builds_a_new_spec_each_call_and_names_its_files():
    check_entry(ideogram4, {"ideogram4": "FamilySpec"})


def test_build_spec_builds_each_name_and_refuses_another():
    assert ideogram4.build_spec("ideogram4").name == "ideogram4"
    assert ideogram4.build_spec("ideogram4") is not ideogram4.build_spec("ideogram4")  # a new spec each call
    with pytest.raises(KeyError):
        ideogram4.ENTRY.build("not_ideogram4")  # the entry refuses a name it does not register


def test_the_entry_holds_its_options_classes():
    assert ideogram4.ENTRY.options_for("ideogram4") is Ideogram4Options
