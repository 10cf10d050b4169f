"""families/videollm/__init__.py: the one table of video-LLM architectures, a family spec per name of it."""

from __future__ import annotations

import pytest
from helpers import ROOT

from dit_lora.catalogue.files import catalogue_of
from dit_lora.contract.spec import FamilySpec
from dit_lora.families import videollm
from dit_lora.registry import available, get_family, get_spec, resolve


def test_entry_names_are_the_architectures_in_table_order():
    assert videollm.ENTRY.names == tuple(videollm.ARCHITECTURES)
    assert videollm.ENTRY.default == "llava_next_video"  # the recipe's default
    assert "qwen2_5_vl" in videollm.ENTRY.names


@pytest.mark.parametrize("name", list(videollm.ARCHITECTURES))
def test_make_builds_the_family_spec_of_each_architecture(name):
    spec = videollm.make(name)
    assert isinstance(spec, FamilySpec) and spec.name == name
    arch = spec.model.arch
    assert type(arch) is type(videollm.architecture_spec(name)) and arch.name == name
    assert spec.info.pipeline_class_name == arch.model_class
    # every component that needs the architecture gets the same one
    assert all(getattr(spec, field).arch is arch
               for field in ("loss", "adapter", "video_qa", "plan", "card", "setup", "trainables", "precision"))


@pytest.mark.parametrize("name", list(videollm.ARCHITECTURES))
def test_every_architecture_is_a_registered_family_whose_spec_is_the_factorys(name):
    assert name in available()
    assert isinstance(get_family(name), FamilySpec) and get_spec(name).model.arch.name == name


def test_make_refuses_an_unknown_architecture():
    with pytest.raises(KeyError):
        videollm.make("llava_onevision")


def test_an_unknown_name_is_an_error_naming_the_known_ones_not_a_silent_demo(tmp_path):
    for call in (lambda: videollm.architecture_spec("videochat_flash"),
                 lambda: videollm.build_demo_model("videochat_flash", tmp_path / "m")):
        with pytest.raises(KeyError, match="videochat_flash.*llava_next_video, qwen2_5_vl, internvl"):
            call()
    assert not (tmp_path / "m").exists()  # nothing was built in its place


def test_the_demo_component_builds_its_architectures_model(monkeypatch, tmp_path):
    built = []
    monkeypatch.setitem(videollm.ARCHITECTURES, "qwen2_5_vl",
                        videollm.ARCHITECTURES["qwen2_5_vl"]._replace(demo=lambda path: built.append(path)))
    videollm.make("qwen2_5_vl").demo.build_model(tmp_path / "m")
    assert built == [tmp_path / "m"]


def test_there_is_no_second_registry_module():
    assert not (ROOT / "dit_lora" / "families" / "videollm" / "registry.py").exists()


def test_entry_catalogue_demo_and_recipe_exist():
    entry = videollm.ENTRY
    assert {c.family for c in catalogue_of(entry.catalogue).entries} == set(entry.names)
    assert all(entry.options_for(name) == entry.options_for(entry.default) for name in entry.names)
    assert all((ROOT / "recipes" / "configs" / config).is_file() for config in entry.demo_configs)
    assert (ROOT / entry.recipe_script).is_file()
