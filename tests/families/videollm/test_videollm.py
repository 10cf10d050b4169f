"""families/videollm/__init__.py: one family name per video-LLM architecture of the registry."""

from __future__ import annotations

import pytest

from helpers import ROOT
from dit_lora.families import videollm
from dit_lora.registry import resolve
from dit_lora.families.videollm import registry
from dit_lora.families.videollm.spec import VideoChatFamily


def test_entry_names_are_the_architectures_in_table_order():
    assert videollm.ENTRY.names == tuple(registry.names())
    assert videollm.ENTRY.default == "llava_next_video"  # the recipe's default
    assert "qwen2_5_vl" in videollm.ENTRY.names


@pytest.mark.parametrize("name", registry.names())
def test_make_builds_the_family_of_each_architecture(name):
    family = videollm.make(name)
    assert isinstance(family, VideoChatFamily) and family.name == name
    assert type(family.spec) is type(registry.spec_for(name))


def test_make_refuses_an_unknown_architecture():
    with pytest.raises(KeyError):
        videollm.make("llava_onevision")


def test_entry_catalogue_demo_and_recipe_exist():
    entry = videollm.ENTRY
    assert {c.family for c in resolve(f"{entry.catalogue}:ENTRIES")} == set(entry.names)
    assert all(entry.options_for(name) == entry.options_for(entry.default) for name in entry.names)
    assert all((ROOT / "recipes" / "configs" / config).is_file() for config in entry.demo_configs)
    assert (ROOT / entry.recipe_script).is_file()
