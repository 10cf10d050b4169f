"""families/videollm/__init__.py: the video-LLM family names and the class each trains (no torch), its ENTRY, and
a family spec per name built through the spec module (``build_spec``)."""

from __future__ import annotations

import subprocess
import sys

import pytest
from helpers import ROOT

from dit_lora.catalogue.files import catalogue_of
from dit_lora.contract.spec import FamilySpec
from dit_lora.families import videollm
from dit_lora.families.videollm.options import VideoChatOptions
from dit_lora.registry import available, get_family, get_spec


def test_entry_names_are_the_model_classes_in_table_order():
    assert videollm.ENTRY.names == tuple(videollm.MODEL_CLASSES)
    assert videollm.ENTRY.default == "llava_next_video"  # the recipe's default
    assert "qwen2_5_vl" in videollm.ENTRY.names
    assert all(videollm.ENTRY.pipelines_for(name) == (cls,) for name, cls in videollm.MODEL_CLASSES.items())


def test_the_entry_holds_its_options_class_and_factory_function_not_paths():
    """The ENTRY's options are the class itself; its factory is this package's own function."""
    assert videollm.ENTRY.options is VideoChatOptions and videollm.ENTRY.factory is videollm.build_spec


def test_importing_the_package_loads_no_torch():
    """The registry imports this package for its ENTRY: the architectures' modules (torch) load only on build."""
    code = "import sys, dit_lora.families.videollm; print('torch' in sys.modules)"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "False"


@pytest.mark.parametrize("name", list(videollm.MODEL_CLASSES))
def test_build_spec_builds_the_family_spec_of_each_architecture(name):
    spec = videollm.build_spec(name)
    assert isinstance(spec, FamilySpec) and spec.name == name
    assert spec.info.pipeline_class_name == videollm.MODEL_CLASSES[name]


@pytest.mark.parametrize("name", list(videollm.MODEL_CLASSES))
def test_every_architecture_is_a_registered_family_whose_spec_is_the_factorys(name):
    assert name in available()
    assert isinstance(get_family(name), FamilySpec) and get_spec(name).model.arch.name == name


def test_build_spec_refuses_an_unknown_architecture():
    with pytest.raises(KeyError):
        videollm.build_spec("llava_onevision")


def test_there_is_no_second_registry_module():
    assert not (ROOT / "dit_lora" / "families" / "videollm" / "registry.py").exists()


def test_entry_catalogue_demo_and_recipe_exist():
    entry = videollm.ENTRY
    assert {c.family for c in catalogue_of(entry.catalogue).entries} == set(entry.names)
    assert all(entry.options_for(name) == entry.options_for(entry.default) for name in entry.names)
    assert all((ROOT / "recipes" / "configs" / config).is_file() for config in entry.demo_configs)
    assert (ROOT / entry.recipe_script).is_file()
