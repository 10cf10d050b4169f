"""families/ltx2/__init__.py: the LTX-2 package's registry entry and its factory, ``build_spec``."""

from __future__ import annotations

import pytest
from family_entries import check_entry

from dit_lora.families import ltx2
from dit_lora.families.ltx2.options import LTX2I2VOptions, LTX2ICOptions, LTX2Options


def test_entry_builds_a_new_spec_each_call_and_names_its_files():
    check_entry(ltx2, {"ltx2": "FamilySpec", "ltx2_i2v": "FamilySpec", "ltx2_ic": "FamilySpec"})


def test_build_spec_builds_each_name_and_refuses_another():
    assert ltx2.build_spec("ltx2").name == "ltx2"
    assert ltx2.build_spec("ltx2_i2v").name == "ltx2_i2v"
    assert ltx2.build_spec("ltx2_ic").name == "ltx2_ic"
    assert ltx2.build_spec("ltx2") is not ltx2.build_spec("ltx2")  # a new spec each call
    with pytest.raises(KeyError):
        ltx2.ENTRY.build("not_ltx2")  # the entry refuses a name it does not register


def test_the_entry_holds_its_options_classes():
    assert ltx2.ENTRY.options_for("ltx2") is LTX2Options
    assert ltx2.ENTRY.options_for("ltx2_i2v") is LTX2I2VOptions
    assert ltx2.ENTRY.options_for("ltx2_ic") is LTX2ICOptions
