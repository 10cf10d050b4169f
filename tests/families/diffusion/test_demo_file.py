"""families/diffusion/demo_file.py: every family's tiny demo data (``demo.json`` beside its ``demo.py``) reads; a
misspelt key, a misspelt ``why`` or a missing component stops with one paragraph naming the file, the place and the
key; no data file is left unread; what a builder is handed is a copy."""

from __future__ import annotations

import importlib
import json
import sys

import pytest

from dit_lora.core.datafile import DataFileError
from dit_lora.families.diffusion.demo_file import WHY, DemoFile
from helpers import ROOT

FAMILIES = ROOT / "dit_lora" / "families"
#: every family folder with a demo.py of the diffusion kit (the video LLMs build theirs in videollm/demo_*.py)
MODULES = sorted(
    f"dit_lora.families.{path.parent.name}.demo"
    for path in FAMILIES.glob("*/demo.py")
    if "families.diffusion import tiny" in path.read_text()
)


def source(module: str) -> DemoFile:
    found = importlib.import_module(module).DEMO
    assert isinstance(found, DemoFile), module
    return found


def copy_as_package(module: str, tmp_path, monkeypatch, edit) -> DemoFile:
    """The family's demo data, changed by ``edit(data)``, as ``<tmp>/copy_<family>_<n>/demo.json`` (a new package
    each time: the read file is cached by its module), read as the family reads its own."""
    family = module.split(".")[-2]
    data = json.loads((FAMILIES / family / "demo.json").read_text())
    edit(data)
    package = tmp_path / f"copy_{family}_{len(list(tmp_path.iterdir()))}"
    package.mkdir()
    (package / "__init__.py").write_text("")
    (package / "demo.json").write_text(json.dumps(data))
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delitem(sys.modules, package.name, raising=False)
    own = source(module)
    return DemoFile(f"{package.name}.demo", own.keys, own.shared, own.optional)


def test_every_diffusion_family_states_its_demo_as_data():
    assert len(MODULES) == 8, MODULES
    shipped = {path.parent.name for path in FAMILIES.glob("*/demo.json")}
    assert shipped == {m.split(".")[-2] for m in MODULES}  # no data file left unread, no family without one
    for module in MODULES:
        data = source(module).read()
        assert data.variants and data.version >= 1, module
        assert data.name == f"dit_lora/families/{module.split('.')[-2]}/demo.json"


@pytest.mark.parametrize("module", MODULES)
def test_no_note_reaches_a_builder(module):
    def notes(value) -> bool:
        if isinstance(value, list):
            return any(notes(v) for v in value)
        return isinstance(value, dict) and (WHY in value or any(notes(v) for v in value.values()))

    data = source(module).read()
    assert not any(notes(data.variant(key)) for key in data.variants), module
    assert not notes(dict(data.shared)), module
    raw = (FAMILIES / module.split(".")[-2] / "demo.json").read_text()
    assert f'"{WHY}"' in raw, f"{module}: the reasons for the values are kept beside them"


@pytest.mark.parametrize("module", MODULES)
def test_a_misspelt_key_names_the_file_the_variant_and_the_key(module, tmp_path, monkeypatch):
    first = next(iter(json.loads((FAMILIES / module.split(".")[-2] / "demo.json").read_text())["variants"]))
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
    assert "version is \"1\", not int" in refused(lambda data: data.update(version="1"))
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
