"""families/lumina2/__init__.py: the Lumina 2 package's registry entry and its factory, ``build_spec``."""

from __future__ import annotations

import pytest
from family_entries import check_entry

from dit_lora.families import lumina2
from dit_lora.families.lumina2.options import Lumina2Options


def test_entry_builds_a_new_spec_each_call_and_names_its_files():
    check_entry(lumina2, {"lumina2": "FamilySpec"})


def test_build_spec_builds_each_name_and_refuses_another():
    assert lumina2.build_spec("lumina2").name == "lumina2"
    assert lumina2.build_spec("lumina2") is not lumina2.build_spec("lumina2")  # a new spec each call
    with pytest.raises(KeyError):
        lumina2.ENTRY.build("not_lumina2")  # the entry refuses a name it does not register


def test_the_entry_holds_its_options_classes():
    assert lumina2.ENTRY.options_for("lumina2") is Lumina2Options
