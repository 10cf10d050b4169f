"""Package data files: the project's literal tables (published configs, peer flags) as JSON, read into its dataclasses.

A data file is one JSON object whose top-level keys its reader names (:func:`read`). JSON because the tables are
mostly copies of published JSON files, ``null`` included (TOML has no null). A top-level ``parts`` object names
values used more than once; anywhere in the file, an object with a ``"$part"`` key stands for the named part (a
list of names: several objects merged), its other keys set in order around it, as ``{"a": 1, **part, "b": 2}``
does in Python; ``{"$part": name}`` alone is the part itself (a list or a string too). Each use is a copy.
:func:`record` builds a frozen dataclass from an object: every key must be a field, every value of the field's
type (a JSON list for a tuple), so a misspelt key or a wrong type stops with the file, the place and the key named.
"""

from __future__ import annotations

import copy
import dataclasses
import json
import types
import typing
from collections.abc import Collection, Mapping
from importlib import resources
from typing import Any, TypeVar

from dit_lora.core.errors import UserError

PART = "$part"
T = TypeVar("T")


class DataFileError(UserError):
    """A package data file that does not read: names the file, the place in it, the key and the fix."""


def path_of(package: str, filename: str) -> str:
    """``dit_lora/families/sana/catalogue.json``: how messages name a data file of ``package``."""
    return f"{package.replace('.', '/')}/{filename}"


def read(
    package: str,
    filename: str,
    keys: Collection[str],
    shared: Mapping[str, Any] | None = None,
    required: Collection[str] = (),
) -> dict[str, Any]:
    """The data file ``filename`` of ``package`` with every ``$part`` replaced; ``parts`` comes back resolved too.

    ``keys`` are the top-level keys the file may have besides ``parts`` (``required`` those it must have);
    ``shared`` are parts every file of a kind may use (a file's own part of the same name is refused: one name, one
    value).
    """
    name = path_of(package, filename)
    try:
        raw = json.loads(resources.files(package).joinpath(filename).read_text(encoding="utf-8"))
    except (OSError, ValueError) as err:
        raise DataFileError(f"{name} does not read as JSON ({err}); fix the file (it ships with dit-lora).")
    if not isinstance(raw, dict):
        raise DataFileError(f"{name} holds a {type(raw).__name__}; a data file is one JSON object.")
    unknown(name, "the top level", raw, {"parts", *keys})
    missing = [key for key in required if key not in raw]
    if missing:
        raise DataFileError(f"{name} lacks the top-level key {missing[0]!r}; the file must state it.")
    own = raw.get("parts", {})
    clash = sorted(set(own) & set(shared or {}))
    if clash:
        raise DataFileError(f"{name}: part {clash[0]!r} is also a shared part; rename the file's own part.")
    parts = {**(shared or {}), **own}
    resolved: dict[str, Any] = {}

    def part(key: str, where: str, seen: tuple[str, ...]) -> Any:
        if key not in parts:
            known = ", ".join(sorted(parts)) or "none"
            raise DataFileError(f"{name}: {where} names part {key!r}, which the file does not define (parts: {known}).")
        if key in seen:
            raise DataFileError(f"{name}: part {key!r} refers to itself ({' -> '.join((*seen, key))}).")
        if key not in resolved:
            resolved[key] = resolve(parts[key], f"part {key!r}", (*seen, key))
        return copy.deepcopy(resolved[key])

    def resolve(value: Any, where: str, seen: tuple[str, ...] = ()) -> Any:
        if isinstance(value, list):
            return [resolve(v, f"{where}[{i}]", seen) for i, v in enumerate(value)]
        if not isinstance(value, dict):
            return value
        if PART in value and len(value) == 1 and isinstance(value[PART], str):
            return part(value[PART], where, seen)
        out: dict[str, Any] = {}
        for key, item in value.items():
            if key != PART:
                out[key] = resolve(item, f"{where}.{key}", seen)
                continue
            for each in [item] if isinstance(item, str) else item:
                merged = part(each, where, seen)
                if not isinstance(merged, dict):
                    raise DataFileError(f"{name}: {where} merges part {each!r}, which is no object.")
                out.update(merged)
        return out

    data = {key: resolve(value, key) for key, value in raw.items() if key != "parts"}
    data["parts"] = {key: part(key, "parts", ()) for key in own}
    return data


def unknown(name: str, where: str, found: Mapping[str, Any], known: Collection[str]) -> None:
    """Refuse the first key of ``found`` not in ``known``, naming the file, the place and the keys it may have."""
    for key in found:
        if key not in known:
            raise DataFileError(
                f"{name}: {where} has the unknown key {key!r}; the keys it may have are {', '.join(sorted(known))} "
                "(a misspelt key? fix it in the file)."
            )


def record(cls: type[T], found: Any, name: str, where: str) -> T:
    """``cls(**found)`` for a frozen dataclass ``cls``: known keys only, required ones present, each value of its
    field's type (JSON lists become the tuples a field declares)."""
    if not isinstance(found, dict):
        raise DataFileError(f"{name}: {where} is a {type(found).__name__}; it must be an object of {cls.__name__}.")
    fields = {f.name: f for f in dataclasses.fields(cls)}  # type: ignore[arg-type]
    unknown(name, where, found, fields)
    missing = [
        f.name
        for f in fields.values()
        if f.name not in found and f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING
    ]
    if missing:
        raise DataFileError(f"{name}: {where} lacks {', '.join(missing)}; every {cls.__name__} states it.")
    hints = _hints(cls)
    values = {key: typed(value, hints[key], name, f"{where}.{key}") for key, value in found.items()}
    try:
        return cls(**values)
    except (TypeError, ValueError) as err:
        raise DataFileError(f"{name}: {where} is refused: {err}.")


def records(cls: type[T], found: Any, name: str, where: str) -> dict[str, T]:
    """``{key: cls(**row)}`` for an object of rows, each checked as :func:`record` checks one."""
    rows = typed(found, dict[str, dict[str, Any]], name, where)
    return {key: record(cls, row, name, f"{where}.{key}") for key, row in rows.items()}


_HINTS: dict[type, dict[str, Any]] = {}


def _hints(cls: type) -> dict[str, Any]:
    """``cls``'s field annotations, evaluated once per class (a catalogue reads a few hundred records)."""
    if cls not in _HINTS:
        _HINTS[cls] = typing.get_type_hints(cls)
    return _HINTS[cls]


def typed(value: Any, hint: Any, name: str, where: str) -> Any:
    """``value`` checked against the annotation ``hint`` (str, int, float, bool, None, unions, ``dict[K, V]``,
    ``list[T]``, ``tuple[T, ...]``, ``tuple[A, B]``, Any), with JSON lists made tuples where ``hint`` says so."""
    if hint is Any:
        return value
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if origin in (typing.Union, types.UnionType):
        for arg in args:
            try:
                return typed(value, arg, name, where)
            except DataFileError:
                continue
    elif origin is dict and isinstance(value, dict):
        return {typed(k, args[0], name, where): typed(v, args[1], name, f"{where}.{k}") for k, v in value.items()}
    elif origin is list and isinstance(value, list):
        return [typed(v, args[0], name, f"{where}[{i}]") for i, v in enumerate(value)]
    elif origin is tuple and isinstance(value, list):
        kinds = [args[0]] * len(value) if len(args) == 2 and args[1] is Ellipsis else list(args)
        if len(kinds) == len(value):
            return tuple(typed(v, k, name, f"{where}[{i}]") for i, (v, k) in enumerate(zip(value, kinds)))
    elif hint is type(None) or hint is None:
        if value is None:
            return None
    elif (hint is float and type(value) is int) or (isinstance(hint, type) and type(value) is hint):
        return value  # a JSON 1 is a float field's 1.0; a bool is no int (type, not isinstance)
    raise DataFileError(
        f"{name}: {where} is {json.dumps(value)[:60]}, not {_spelt(hint)}; write it as {_spelt(hint)} in the file."
    )


def _spelt(hint: Any) -> str:
    """``int``, ``a list of str``, ``str or null``: a type as the message about a data file says it."""
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if origin in (typing.Union, types.UnionType):
        return " or ".join(_spelt(a) for a in args)
    if origin is dict:
        return f"an object of {_spelt(args[1])}"
    if origin in (list, tuple):
        return f"a list of {_spelt(args[0])}"
    if hint is type(None) or hint is None:
        return "null"
    return getattr(hint, "__name__", str(hint))
