"""families/krea2/__init__.py: the Krea 2 package's registry entry and its factory, ``build_spec``."""

from __future__ import annotations

import pytest
from family_entries import check_entry

from dit_lora.families import krea2
from dit_lora.families.krea2.options import Krea2Options


def test_entry_builds_a_new_spec_each_call_and_names_its_files():
    check_entry(krea2, {"krea2": "FamilySpec"})


def test_build_spec_builds_each_name_and_refuses_another():
    assert krea2.build_spec("krea2").name == "krea2"
    assert krea2.build_spec("krea2") is not krea2.build_spec("krea2")  # a new spec each call
    with pytest.raises(KeyError):
        krea2.ENTRY.build("not_krea2")  # the entry refuses a name it does not register


def test_the_entry_holds_its_options_classes():
    assert krea2.ENTRY.options_for("krea2") is Krea2Options
