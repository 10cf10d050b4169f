"""``FamilyEntry`` (``dit_lora/registry.py``): what a family package declares, checked when it is made."""

from __future__ import annotations

import dataclasses

import pytest

from dit_lora.registry import FamilyEntry, resolve


def test_an_entry_is_immutable_and_its_first_name_is_the_recipe_default():
    entry = FamilyEntry(names=("one", "two"), factory="dit_lora.families.sana:make")
    assert entry.default == "one" and entry.recipe_script == "recipes/one_lora.py"
    assert FamilyEntry(names=("x",), factory=str, recipe="other_lora.py").recipe_script == "recipes/other_lora.py"
    with pytest.raises(dataclasses.FrozenInstanceError):
        entry.names = ("three",)


@pytest.mark.parametrize("names", [(), "sana", ("a", "a"), ("a", "")])
def test_names_must_be_a_tuple_of_distinct_names(names):
    with pytest.raises(ValueError, match="FamilyEntry.names"):
        FamilyEntry(names=names, factory=str)


def test_options_for_each_name():
    shared = FamilyEntry(names=("a", "b"), factory=str, options="pkg.options:Opts")
    assert shared.options_for("a") == shared.options_for("b") == "pkg.options:Opts"
    split = FamilyEntry(names=("a", "b"), factory=str, options={"b": "pkg.options:B"})
    assert split.options_for("a") is None and split.options_for("b") == "pkg.options:B"
    with pytest.raises(TypeError):  # the mapping is read-only too
        split.options["a"] = "pkg.options:A"
    with pytest.raises(ValueError, match="not among its names"):
        FamilyEntry(names=("a",), factory=str, options={"c": "pkg.options:C"})


def test_build_calls_the_factory_with_the_name_and_refuses_another():
    made = []
    entry = FamilyEntry(names=("a", "b"), factory=lambda name: made.append(name) or name.upper())
    assert entry.build("b") == "B" and made == ["b"]
    with pytest.raises(KeyError, match="'c' is not a name of this entry"):
        entry.build("c")


def test_resolve_imports_a_module_attribute_path_on_use():
    from dit_lora.families.sana.catalogue import ENTRIES

    assert resolve("dit_lora.families.sana.catalogue:ENTRIES") is ENTRIES
    assert resolve("dit_lora.registry:FamilyEntry.recipe_script") is FamilyEntry.recipe_script
    assert resolve(len) is len  # a callable is used as it is
    with pytest.raises(ValueError, match="module:attribute"):
        resolve("dit_lora.families.sana")
