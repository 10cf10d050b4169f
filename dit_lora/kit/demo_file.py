"""A family's tiny demo model as data: ``demo.json`` beside its ``demo.py`` (a video LLM's ``demo_<arch>.json``
beside its ``demo_<arch>.py``), read by :class:`DemoFile`.

The file holds ``version`` (the tiny folder's marker version: bump it when a value changes, so cached builds are
rebuilt), ``variants`` (each size or variant of the tiny pipeline: an object of the keys the family's ``demo.py``
names, each a component's keyword arguments, a resolution, a pipeline class ...), optionally ``shared`` (the values
every variant uses: the scheduler's config, the clip geometry) and ``parts`` (values used more than
once, named by ``{"$part": name}``; :mod:`dit_lora.core.datafile` says how).

JSON has no comments, so the reason a value is what it is sits beside it: any object may carry a ``"why"`` key, a
string about the object, or an object of strings keyed by the keys it explains (``{"caption_channels": 48, "why":
{"caption_channels": "!= the model width on purpose"}}``). The reader takes every ``why`` out; one naming a key the
object lacks is refused as a misspelt key is. A variant's or ``shared``'s misspelt key stops with one paragraph
naming the file, the place and the key; the component configs themselves are checked by the classes they build.
"""

from __future__ import annotations

import copy
import functools
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from dit_lora.core.datafile import DataFileError, path_of, read, typed, unknown

__all__ = ["WHY", "DemoData", "DemoFile"]

#: the key of an object's notes: why its values are what they are (taken out when the file is read)
WHY = "why"


@dataclass(frozen=True)
class DemoData:
    """A demo data file, read: ``version`` (the marker's), ``variants`` and ``shared`` (hand out copies: the read
    file is cached, and a builder may change what it is given)."""

    name: str
    version: int
    variants: Mapping[str, Mapping[str, Any]]
    shared: Mapping[str, Any]
    #: what a variant is, in the refusal of an unknown one: ``"tiny Sana size"`` (:attr:`DemoFile.what`)
    what: str = "tiny demo variant"

    def variant(self, key: str) -> dict[str, Any]:
        """A deep copy of the variant ``key``; an unknown one is a ``ValueError`` naming the variants there are."""
        if key not in self.variants:
            raise ValueError(f"unknown {self.what} {key!r}; choose from {', '.join(self.variants)}")
        return copy.deepcopy(dict(self.variants[key]))

    def value(self, key: str) -> Any:
        """A deep copy of the shared value ``key``."""
        return copy.deepcopy(self.shared[key])

    def table(self) -> dict[str, dict[str, Any]]:
        """A deep copy of every variant by name (``TINY_<FAMILY>_CONFIGS``)."""
        return {key: self.variant(key) for key in self.variants}


@dataclass(frozen=True)
class DemoFile:
    """Where a family's demo data lives and what it may hold: beside ``module`` (``dit_lora.families.sana.demo``:
    its ``__name__``), the keys a variant states (``keys``; those in ``optional`` it may leave out) and the keys of
    ``shared``; ``what`` names a variant in the refusal of an unknown one (``"tiny Sana size"``)."""

    module: str
    keys: tuple[str, ...]
    shared: tuple[str, ...] = ()
    optional: tuple[str, ...] = ()
    filename: str = "demo.json"
    what: str = "tiny demo variant"

    @property
    def package(self) -> str:
        """The package the file ships in: the module's."""
        return self.module.rpartition(".")[0]

    @property
    def name(self) -> str:
        """``dit_lora/families/sana/demo.json``: how messages name the file."""
        return path_of(self.package, self.filename)

    def read(self) -> DemoData:
        """The file read and checked (once per process: :func:`_read` caches it)."""
        return _read(self)


@functools.cache
def _read(source: DemoFile) -> DemoData:
    name = source.name
    keys = ("version", "variants", "shared", WHY)
    data = read(source.package, source.filename, keys, required=("version", "variants"))
    version = typed(data["version"], int, name, "version")
    typed(data.get(WHY, ""), str, name, WHY)
    variants = typed(data["variants"], dict[str, dict[str, Any]], name, "variants")
    if not variants:
        raise DataFileError(f"{name}: variants is empty; the file must state at least one variant.")
    for key, found in variants.items():
        where = f"variants.{key}"
        unknown(name, where, found, (*source.keys, WHY))
        missing = [k for k in source.keys if k not in found and k not in source.optional]
        if missing:
            raise DataFileError(f"{name}: {where} lacks {', '.join(missing)}; every variant of this file states it.")
    shared = typed(data.get("shared", {}), dict[str, Any], name, "shared")
    unknown(name, "shared", shared, (*source.shared, WHY))
    return DemoData(
        name,
        version,
        {key: _without_notes(found, name, f"variants.{key}") for key, found in variants.items()},
        _without_notes(shared, name, "shared"),
        source.what,
    )


def _without_notes(value: Any, name: str, where: str) -> Any:
    """``value`` with every object's ``why`` taken out, each checked: a string, or strings keyed by the object's own
    keys."""
    if isinstance(value, list):
        return [_without_notes(v, name, f"{where}[{i}]") for i, v in enumerate(value)]
    if not isinstance(value, dict):
        return value
    notes = value.get(WHY, "")
    if isinstance(notes, dict):
        unknown(name, f"{where}.{WHY}", notes, [k for k in value if k != WHY])
        typed(notes, dict[str, str], name, f"{where}.{WHY}")
    else:
        typed(notes, str, name, f"{where}.{WHY}")
    return {k: _without_notes(v, name, f"{where}.{k}") for k, v in value.items() if k != WHY}
