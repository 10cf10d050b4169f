"""catalogue/files.py: every family's ``catalogue.json`` reads into ``Checkpoint`` entries, field by field; a misspelt
or mistyped key in any of them stops naming the file, the entry and the key; each says where its facts were checked
(``provenance``); no data file is left unread."""

from __future__ import annotations

import dataclasses
import json
import sys
import typing

import pytest

from dit_lora.catalogue import data_files
from dit_lora.catalogue.entry import Checkpoint
from dit_lora.catalogue.files import catalogue_of, read_catalogue
from dit_lora.core.datafile import DataFileError
from helpers import ROOT

PACKAGES = data_files()


def data_file(package: str):
    return ROOT / package.replace(".", "/") / "catalogue.json"


def copy_as_package(package: str, tmp_path, monkeypatch, edit) -> str:
    """The family package's data file, changed by ``edit(data)``, as ``<tmp>/<name>/catalogue.json``."""
    name = "copy_" + package.split(".")[-1]
    data = json.loads(data_file(package).read_text())
    edit(data)
    (tmp_path / name).mkdir()
    (tmp_path / name / "__init__.py").write_text("")
    (tmp_path / name / "catalogue.json").write_text(json.dumps(data))
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delitem(sys.modules, name, raising=False)
    return name


def test_every_family_package_reads_its_data_file_and_says_where_its_facts_were_checked():
    assert len(PACKAGES) >= 9
    for package in PACKAGES:
        found, loaded = read_catalogue(package), catalogue_of(package)
        assert found.entries, package
        # by Hub id: a test that hands an entry's config to transformers may have changed the shared copy
        assert [e.hub_id for e in loaded.entries] == [e.hub_id for e in found.entries], package
        assert [e.hub_id for e in loaded.refused] == [e.hub_id for e in found.refused], package
        assert found.provenance and all(p.strip() for p in found.provenance), package


@pytest.mark.parametrize("provenance", [None, [], [""], "one string"], ids=["missing", "empty", "blank", "string"])
def test_a_catalogue_without_its_provenance_is_refused(provenance, tmp_path, monkeypatch):
    def strip(data):
        if provenance is None:
            del data["provenance"]
        else:
            data["provenance"] = provenance

    copy = copy_as_package("dit_lora.families.dit", tmp_path, monkeypatch, strip)
    with pytest.raises(DataFileError, match=r"copy_dit/catalogue.json.*'provenance'"):
        read_catalogue(copy)


def test_no_catalogue_data_file_is_left_unread():
    shipped = set((ROOT / "dit_lora" / "families").glob("*/catalogue*.json"))
    assert shipped == {data_file(p) for p in PACKAGES}


@pytest.mark.parametrize("package", PACKAGES)
def test_every_field_is_known_and_of_its_type(package):
    hints = typing.get_type_hints(Checkpoint)
    raw = json.loads(data_file(package).read_text())
    assert set(raw) <= {"provenance", "licenses", "parts", "entries", "refused"}
    found = read_catalogue(package)
    for entry in found.entries + found.refused:
        for field in dataclasses.fields(Checkpoint):
            value, hint = getattr(entry, field.name), hints[field.name]
            assert isinstance(value, typing.get_origin(hint) or hint), (entry.hub_id, field.name)
    for listed in (raw.get("entries", []), raw.get("refused", [])):
        for entry in listed:
            assert set(entry) <= set(hints), entry.get("hub_id")


@pytest.mark.parametrize("package", PACKAGES)
def test_a_misspelt_key_names_the_file_the_entry_and_the_key(package, tmp_path, monkeypatch):
    def misspell(data):
        entry = data["entries"][-1]
        entry["text_lenght"] = entry.pop("text_length")

    copy = copy_as_package(package, tmp_path, monkeypatch, misspell)
    with pytest.raises(DataFileError) as caught:
        read_catalogue(copy)
    last = len(json.loads(data_file(package).read_text())["entries"]) - 1
    message = str(caught.value)
    assert f"{copy}/catalogue.json" in message and f"entries[{last}]" in message, message
    assert "unknown key 'text_lenght'" in message and "text_length" in message, message


def test_a_value_of_another_type_names_the_key_and_the_type(tmp_path, monkeypatch):
    def quote(data):
        data["entries"][0]["text_length"] = "300"

    copy = copy_as_package("dit_lora.families.sana", tmp_path, monkeypatch, quote)
    with pytest.raises(DataFileError, match=r"copy_sana/catalogue.json: entries\[0\] \(.*\)\.text_length is \"300\", not int"):
        read_catalogue(copy)


def test_license_of_takes_the_longest_prefix_in_any_case_and_nothing_for_a_local_folder(tmp_path):
    from dit_lora.catalogue import license_of

    assert license_of("flux2", "black-forest-labs/FLUX.2-dev") == "other"
    assert license_of("flux2", "Black-Forest-Labs/flux.2-klein-4b") == "apache-2.0"  # Hub ids ignore case
    assert license_of("cogvideox_i2v", "THUDM/CogVideoX-5b-I2V") == "other"  # every name of the entry
    assert license_of("wan", "someone/Wan2.1-T2V-1.3B-Diffusers") is None  # no prefix names it
    assert license_of("wan", str(tmp_path)) is None  # a local folder: its license is not known
    assert license_of("no_such_family", "Wan-AI/Wan2.1-T2V-1.3B-Diffusers") is None


@pytest.mark.parametrize("package", PACKAGES)
def test_every_entry_of_a_catalogue_with_licenses_gets_one(package):
    """A family whose catalogue states licenses states one for each checkpoint it lists (a model card names it)."""
    from dit_lora.catalogue import license_of
    from dit_lora.registry import entries

    found = catalogue_of(package)
    if not found.licenses:
        return
    names = next(e.names for e in entries() if e.catalogue == package)
    assert all(license_of(names[0], e.hub_id) for e in found.entries), package


@pytest.mark.parametrize("licenses", [["apache-2.0"], {"Org/": ""}, {"Org/": 2}], ids=["list", "empty", "number"])
def test_licenses_that_are_not_prefix_to_name_are_refused(licenses, tmp_path, monkeypatch):
    copy = copy_as_package("dit_lora.families.wan", tmp_path, monkeypatch, lambda data: data.update(licenses=licenses))
    with pytest.raises(DataFileError, match=r"copy_wan/catalogue.json: 'licenses' must map"):
        read_catalogue(copy)
