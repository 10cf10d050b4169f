"""families/cogvideox/__init__.py: one package, two names (text-to-video and image-to-video)."""

from __future__ import annotations

import dataclasses

import pytest
from helpers import ROOT

from dit_lora.catalogue.files import catalogue_of
from dit_lora.contract.spec import FamilySpec
from dit_lora.families import cogvideox
from dit_lora.families.cogvideox.i2v import CogVideoXI2VEncoders


def test_make_picks_the_family_by_name():
    t2v, i2v = cogvideox.ENTRY.build("cogvideox"), cogvideox.ENTRY.build("cogvideox_i2v")
    assert isinstance(t2v, FamilySpec) and t2v.name == "cogvideox" and not isinstance(t2v.encoders, CogVideoXI2VEncoders)
    assert isinstance(i2v.encoders, CogVideoXI2VEncoders) and i2v.name == "cogvideox_i2v"
    assert cogvideox.ENTRY.build("cogvideox") is not t2v  # a new spec per call


def test_entry_gives_each_name_its_own_options():
    entry = cogvideox.ENTRY
    assert entry.names == ("cogvideox", "cogvideox_i2v") and entry.default == "cogvideox"
    t2v, i2v = (entry.options_for(name) for name in entry.names)
    assert t2v is not i2v and dataclasses.is_dataclass(t2v) and issubclass(i2v, t2v)
    with pytest.raises(TypeError):
        entry.options["dit"] = "x"  # the mapping is read-only


def test_entry_catalogue_demos_and_recipe_exist():
    entry = cogvideox.ENTRY
    assert {c.family for c in catalogue_of(entry.catalogue).entries} == set(entry.names)
    assert len(entry.demo_configs) == 2
    assert all((ROOT / "recipes" / "configs" / config).is_file() for config in entry.demo_configs)
    assert (ROOT / entry.recipe_script).is_file() and entry.recipe_script.endswith("cogvideox_lora.py")
