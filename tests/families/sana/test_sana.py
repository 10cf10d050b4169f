"""families/sana/__init__.py: the Sana package's registry entry and factory."""

from __future__ import annotations

import dataclasses

import pytest

from helpers import ROOT
from dit_lora.catalogue.files import catalogue_of
from dit_lora.families import sana
from dit_lora.contract.spec import FamilySpec


def test_make_builds_a_new_sana_family_each_call():
    first, second = sana.ENTRY.build("sana"), sana.ENTRY.build("sana")
    assert isinstance(first, FamilySpec) and first.name == "sana"
    assert first is not second  # a run never shares a family object with another
    assert first.loss is not second.loss  # nor a component


def test_entry_names_its_options_catalogue_demo_and_recipe():
    entry = sana.ENTRY
    assert entry.names == ("sana",) and entry.default == "sana"
    assert entry.build("sana").name == "sana"
    with pytest.raises(KeyError, match="sana"):
        entry.build("dit")
    options = entry.options_for("sana")
    assert dataclasses.is_dataclass(options) and options.__module__ == "dit_lora.families.sana.options"
    assert catalogue_of(entry.catalogue).entries  # the catalogue has entries
    assert all((ROOT / "recipes" / "configs" / config).is_file() for config in entry.demo_configs)
    assert entry.recipe_script == "recipes/sana_lora.py" and (ROOT / entry.recipe_script).is_file()
