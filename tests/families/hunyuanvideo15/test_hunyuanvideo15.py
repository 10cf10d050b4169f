"""families/hunyuanvideo15/__init__.py: the HunyuanVideo 1.5 package's registry entry and its factory, ``build_spec``."""

from __future__ import annotations

import pytest
from family_entries import check_entry

from dit_lora.families import hunyuanvideo15
from dit_lora.families.hunyuanvideo15.options import HunyuanVideo15I2VOptions, HunyuanVideo15Options


def test_entry_builds_a_new_spec_each_call_and_names_its_files():
    check_entry(hunyuanvideo15, {"hunyuanvideo15": "FamilySpec", "hunyuanvideo15_i2v": "FamilySpec"})


def test_build_spec_builds_each_name_and_refuses_another():
    assert hunyuanvideo15.build_spec("hunyuanvideo15").name == "hunyuanvideo15"
    assert hunyuanvideo15.build_spec("hunyuanvideo15_i2v").name == "hunyuanvideo15_i2v"
    assert hunyuanvideo15.build_spec("hunyuanvideo15") is not hunyuanvideo15.build_spec("hunyuanvideo15")  # a new spec each call
    with pytest.raises(KeyError):
        hunyuanvideo15.ENTRY.build("not_hunyuanvideo15")  # the entry refuses a name it does not register


def test_the_entry_holds_its_options_classes():
    assert hunyuanvideo15.ENTRY.options_for("hunyuanvideo15") is HunyuanVideo15Options
    assert hunyuanvideo15.ENTRY.options_for("hunyuanvideo15_i2v") is HunyuanVideo15I2VOptions
