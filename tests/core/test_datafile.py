"""core/datafile.py: a package data file read with its parts resolved, and records checked by field name and type."""

from __future__ import annotations

import json
import sys
from dataclasses import dataclass

import pytest

from dit_lora.core.datafile import DataFileError, read, record, records, typed


@dataclass(frozen=True)
class Row:
    name: str
    size: int
    tags: tuple[str, ...] = ()
    maybe: str | None = None
    pairs: tuple[tuple[str, str], ...] = ()


def package(tmp_path, monkeypatch, name: str, files: dict[str, object]) -> str:
    """A throwaway package ``name`` holding ``files`` (JSON-dumped), importable for the test."""
    folder = tmp_path / name
    folder.mkdir()
    (folder / "__init__.py").write_text("")
    for filename, content in files.items():
        (folder / filename).write_text(content if isinstance(content, str) else json.dumps(content))
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delitem(sys.modules, name, raising=False)  # a parametrised test's earlier package of that name
    return name


def test_parts_are_merged_in_place_in_order_and_each_use_is_a_copy(tmp_path, monkeypatch):
    data = {
        "parts": {"ids": {"b": 2, "c": 3}, "more": {"$part": "ids", "d": 4}, "words": ["x", "y"]},
        "rows": [{"a": 1, "$part": "ids", "e": 5}, {"$part": ["ids", "more"], "c": 30}, {"$part": "words"}],
    }
    pkg = package(tmp_path, monkeypatch, "df_parts", {"data.json": data})
    found = read(pkg, "data.json", ("rows",))
    first, second, words = found["rows"]
    assert list(first.items()) == [("a", 1), ("b", 2), ("c", 3), ("e", 5)]  # as {"a": 1, **ids, "e": 5}
    assert second == {"b": 2, "c": 30, "d": 4} and words == ["x", "y"]
    assert found["parts"]["more"] == {"b": 2, "c": 3, "d": 4}
    first["b"] = 99
    assert found["parts"]["ids"]["b"] == 2  # no use shares an object with another


@pytest.mark.parametrize(
    ("data", "words"),
    [
        ({"rows": [], "colour": 1}, ["df_bad/data.json", "the top level", "'colour'", "rows"]),
        ({"rows": [{"$part": "missing"}]}, ["df_bad/data.json", "rows[0]", "'missing'"]),
        ({"parts": {"a": {"$part": "a"}}, "rows": []}, ["df_bad/data.json", "'a'", "refers to itself"]),
        ({"parts": {"s": "text"}, "rows": [{"$part": "s", "k": 1}]}, ["df_bad/data.json", "rows[0]", "no object"]),
        ({}, ["df_bad/data.json", "'rows'"]),
        ("{not json", ["df_bad/data.json", "JSON"]),
    ],
)
def test_a_bad_file_is_refused_naming_the_file_and_the_key(tmp_path, monkeypatch, data, words):
    pkg = package(tmp_path, monkeypatch, "df_bad", {"data.json": data})
    with pytest.raises(DataFileError) as caught:
        read(pkg, "data.json", ("rows",), required=("rows",))
    assert all(word in str(caught.value) for word in words), str(caught.value)


def test_a_shared_part_may_be_named_but_not_redefined(tmp_path, monkeypatch):
    files = {"ok.json": {"rows": [{"$part": "s"}]}, "clash.json": {"parts": {"s": 1}}}
    pkg = package(tmp_path, monkeypatch, "df_shared", files)
    assert read(pkg, "ok.json", ("rows",), shared={"s": {"k": 1}})["rows"] == [{"k": 1}]
    with pytest.raises(DataFileError, match=r"df_shared/clash.json: part 's' is also a shared part"):
        read(pkg, "clash.json", ("rows",), shared={"s": {"k": 1}})


def test_a_record_takes_known_keys_of_their_types_and_makes_lists_tuples():
    row = record(Row, {"name": "a", "size": 2, "tags": ["x"], "pairs": [["p", "q"]]}, "f.json", "rows[0]")
    assert row == Row("a", 2, ("x",), None, (("p", "q"),))
    assert records(Row, {"k": {"name": "b", "size": 1}}, "f.json", "rows") == {"k": Row("b", 1)}


@pytest.mark.parametrize(
    ("found", "words"),
    [
        ({"name": "a", "size": 2, "tgas": ["x"]}, ["f.json", "rows[0]", "unknown key 'tgas'", "tags"]),
        ({"name": "a"}, ["f.json", "rows[0] lacks size"]),
        ({"name": "a", "size": "2"}, ["f.json", "rows[0].size", "not int"]),
        ({"name": "a", "size": True}, ["rows[0].size", "not int"]),
        ({"name": "a", "size": 2, "tags": "x"}, ["rows[0].tags", "a list of str"]),
        ({"name": "a", "size": 2, "maybe": 3}, ["rows[0].maybe", "str or null"]),
        ({"name": "a", "size": 2, "pairs": [["p"]]}, ["rows[0].pairs"]),
        (["name"], ["f.json", "rows[0] is a list"]),
    ],
)
def test_a_misspelt_or_mistyped_key_names_the_file_the_place_and_the_key(found, words):
    with pytest.raises(DataFileError) as caught:
        record(Row, found, "f.json", "rows[0]")
    assert all(word in str(caught.value) for word in words), str(caught.value)


def test_typed_reads_a_float_field_from_an_integer_and_nested_tables():
    assert typed(1, float, "f.json", "x") == 1
    assert typed({"a": ["x", ["y"]]}, dict[str, tuple[str, tuple[str, ...]]], "f.json", "t") == {"a": ("x", ("y",))}
