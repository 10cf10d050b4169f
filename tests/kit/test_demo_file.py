"""kit/demo_file.py: every family's tiny demo data (``demo.json`` beside a diffusion family's
``demo.py``, ``demo_<arch>.json`` beside a video LLM's ``demo_<arch>.py``) reads; a misspelt key, a misspelt ``why``
or a missing component stops with one paragraph naming the file, the place and the key; no data file is left unread;
what a builder is handed is a copy."""

from __future__ import annotations

import fnmatch
import importlib
import json
import sys
import tomllib

import pytest

from dit_lora.core.datafile import DataFileError
from dit_lora.kit.demo_file import WHY, DemoFile
from helpers import ROOT

FAMILIES = ROOT / "dit_lora" / "families"
#: every diffusion family's demo.py (those built by the kit's tiny builders)
DIFFUSION = sorted(
    f"dit_lora.families.{path.parent.name}.demo"
    for path in FAMILIES.glob("*/demo.py")
    if "kit import tiny" in path.read_text()
)
#: every module a demo data file ships beside
MODULES = sorted(f"dit_lora.families.{path.parent.name}.{path.stem}" for path in FAMILIES.glob("*/demo*.json"))


def data_file(module: str):
    family, stem = module.split(".")[-2:]
    return FAMILIES / family / f"{stem}.json"


def source(module: str) -> DemoFile:
    found = importlib.import_module(module).DEMO
    assert isinstance(found, DemoFile), module
    return found


def copy_as_package(module: str, tmp_path, monkeypatch, edit) -> DemoFile:
    """The family's demo data, changed by ``edit(data)``, as ``<tmp>/copy_<family>_<n>/demo.json`` (a new package
    each time: the read file is cached by its module), read as the family reads its own."""
    family, own = module.split(".")[-2], source(module)
    data = json.loads(data_file(module).read_text())
    edit(data)
    package = tmp_path / f"copy_{family}_{len(list(tmp_path.iterdir()))}"
    package.mkdir()
    (package / "__init__.py").write_text("")
    (package / own.filename).write_text(json.dumps(data))
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delitem(sys.modules, package.name, raising=False)
    return DemoFile(f"{package.name}.demo", own.keys, own.shared, own.optional, own.filename)


def test_every_family_states_its_demo_as_data():
    from family_cases import entry_defaults, package_of

    from dit_lora.kit.components import DiffusionModel
    from dit_lora.registry import get_spec

    # every built-in diffusion family builds its demo with the kit (not the video LLMs: transformers models)
    diffusion = {package_of(name) for name in entry_defaults() if isinstance(get_spec(name).model, DiffusionModel)}
    assert {m.split(".")[2] for m in DIFFUSION} == diffusion, DIFFUSION
    assert set(DIFFUSION) <= set(MODULES), DIFFUSION  # no diffusion family without one
    assert len(MODULES) >= 12, MODULES
    for module in MODULES:  # no data file left unread: the module beside it reads it
        data = source(module).read()
        assert data.variants and data.version >= 1, module
        assert data.name == str(data_file(module).relative_to(ROOT)), module


def test_a_plain_install_ships_every_demo_data_file():
    globs = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["package-data"]["*"]
    for module in MODULES:
        assert any(fnmatch.fnmatch(data_file(module).name, glob) for glob in globs), module


@pytest.mark.parametrize("module", MODULES)
def test_no_note_reaches_a_builder(module):
    def notes(value) -> bool:
        if isinstance(value, list):
            return any(notes(v) for v in value)
        return isinstance(value, dict) and (WHY in value or any(notes(v) for v in value.values()))

    data = source(module).read()
    assert not any(notes(data.variant(key)) for key in data.variants), module
    assert not notes(dict(data.shared)), module
    raw = data_file(module).read_text()
    assert f'"{WHY}"' in raw, f"{module}: the reasons for the values are kept beside them"


@pytest.mark.parametrize("module", MODULES)
def test_a_misspelt_key_names_the_file_the_variant_and_the_key(module, tmp_path, monkeypatch):
    first = next(iter(json.loads(data_file(module).read_text())["variants"]))
    key = source(module).keys[0]

    def misspell(data):
        variant = data["variants"][first]
        variant[key + "s"] = variant.pop(key)

    copy = copy_as_package(module, tmp_path, monkeypatch, misspell)
    with pytest.raises(DataFileError) as caught:
        copy.read()
    message = str(caught.value)
    assert message.startswith(f"{copy.name}: variants.{first} has the unknown key {key + 's'!r}"), message
    assert "\n" not in message and "fix it in the file" in message


def test_a_misspelt_note_a_missing_component_and_a_wrong_type_are_refused(tmp_path, monkeypatch):
    module = "dit_lora.families.sana.demo"

    def refused(edit) -> str:
        with pytest.raises(DataFileError) as caught:
            copy_as_package(module, tmp_path, monkeypatch, edit).read()
        return str(caught.value)

    def note(data):
        data["variants"]["tiny"]["transformer"][WHY]["caption_channel"] = "misspelt"

    assert "variants.tiny.transformer.why has the unknown key 'caption_channel'" in refused(note)
    assert "variants.small lacks vae" in refused(lambda data: data["variants"]["small"].pop("vae"))
    assert 'version is "1", not int' in refused(lambda data: data.update(version="1"))
    assert "shared has the unknown key 'schedular'" in refused(
        lambda data: data["shared"].update(schedular=data["shared"].pop("scheduler"))
    )


def test_the_builders_are_handed_copies():
    sana = importlib.import_module("dit_lora.families.sana.demo")
    config = sana.get_tiny_sana_config("tiny")
    config["transformer"]["num_layers"] = 99
    config["vae"]["encoder_block_types"].append("ResBlock")
    assert sana.get_tiny_sana_config("tiny")["transformer"]["num_layers"] == 2
    assert len(sana.DEMO.read().variant("tiny")["vae"]["encoder_block_types"]) == 4


@pytest.mark.parametrize("module", MODULES)
def test_an_unknown_variant_is_refused_in_one_wording_naming_every_variant(module):
    """Every family refuses a tiny variant its file lacks the same way: what a variant is there, the name asked
    for, and every name the file holds (the kit's check, not each demo.py's own words)."""
    data = source(module).read()
    with pytest.raises(ValueError) as refused:
        data.variant("no-such-variant")
    message = str(refused.value)
    assert message.startswith(f"unknown {source(module).what} 'no-such-variant'; choose from "), message
    assert message.endswith(", ".join(data.variants))
