"""A family's catalogue data file (``catalogue.json`` beside its ``catalogue.py``) read into :class:`Checkpoint`
entries.

The file holds ``entries`` (the checkpoints dit-lora trains), optionally ``refused`` (recognised, not trained:
each with its ``refusal`` paragraph) and ``parts`` (values several entries share, named by ``{"$part": name}``;
:mod:`dit_lora.core.datafile` says how). Each entry's keys are :class:`Checkpoint` fields, checked by name and
type, so a misspelt key stops naming the file, the entry and the key. The text encoders' parts of
``text_encoders.json`` may be named by every file.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from dit_lora.catalogue.entry import Checkpoint
from dit_lora.catalogue.text_encoders import PARTS
from dit_lora.core.datafile import path_of, read, record


@dataclass(frozen=True)
class CatalogueFile:
    """What a catalogue data file holds, read: its entries, its refused entries and its parts by name."""

    entries: list[Checkpoint]
    refused: list[Checkpoint]
    parts: dict[str, Any]


def read_catalogue(module: str, filename: str = "catalogue.json") -> CatalogueFile:
    """The data file of the catalogue module ``module`` (``dit_lora.families.sana.catalogue``): ``filename`` in the
    module's package, each entry checked against :class:`Checkpoint`'s fields and types."""
    package = module.rpartition(".")[0]
    name = path_of(package, filename)
    data = read(package, filename, ("entries", "refused"), shared=PARTS)

    def listed(key: str) -> list[Checkpoint]:
        found = data.get(key, [])
        return [record(Checkpoint, e, name, f"{key}[{i}] ({_hub_id(e)})") for i, e in enumerate(found)]

    return CatalogueFile(listed("entries"), listed("refused"), data["parts"])


def _hub_id(found: Any) -> str:
    return str(found.get("hub_id", "no hub_id")) if isinstance(found, dict) else "not an object"
