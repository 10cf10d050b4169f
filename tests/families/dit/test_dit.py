"""families/dit/__init__.py: the DiT package's registry entry and factory."""

from __future__ import annotations

import dataclasses

from helpers import ROOT
from dit_lora.catalogue.files import catalogue_of
from dit_lora.families import dit
from dit_lora.contract.spec import FamilySpec


def test_make_builds_a_new_dit_family_each_call():
    first, second = dit.ENTRY.build("dit"), dit.ENTRY.build("dit")
    assert isinstance(first, FamilySpec) and first.name == "dit"
    assert first is not second  # a run never shares a family object with another
    assert first.loss is not second.loss  # nor a component


def test_entry_names_its_options_catalogue_demo_and_recipe():
    entry = dit.ENTRY
    assert entry.names == ("dit",)
    options = entry.options_for("dit")
    assert dataclasses.is_dataclass(options) and options.__module__ == "dit_lora.families.dit.options"
    assert {c.family for c in catalogue_of(entry.catalogue).entries} == {"dit"}
    assert entry.demo_configs == ("dit_class/demo.yaml",)
    assert (ROOT / "recipes" / "configs" / "dit_class" / "demo.yaml").is_file()
    # recipes/dit_lora.py would shadow the dit_lora package when a recipe runs as a script
    assert entry.recipe_script == "recipes/dit_class_lora.py" and (ROOT / entry.recipe_script).is_file()
