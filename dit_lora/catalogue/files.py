"""A family's catalogue data file (``catalogue.json`` in its package, which its registry entry names) read into
:class:`Checkpoint` entries.

The file holds ``provenance`` (where each fact was checked: a list of paragraphs, the file's documentation),
``entries`` (the checkpoints dit-lora trains), optionally ``licenses`` (a Hub-id prefix to the license a model
card names: :func:`dit_lora.catalogue.license_of`), ``refused`` (recognised, not trained: each with its
``refusal`` paragraph) and ``parts`` (values several entries share, named by ``{"$part": name}``;
:mod:`dit_lora.core.datafile` says how). Each entry's keys are :class:`Checkpoint` fields, checked by name and
type, so a misspelt key stops naming the file, the entry and the key. The text encoders' parts of
``text_encoders.json`` may be named by every file.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cache
from typing import Any

from dit_lora.catalogue.entry import Checkpoint
from dit_lora.catalogue.text_encoders import PARTS
from dit_lora.core.datafile import DataFileError, path_of, read, record


@dataclass(frozen=True)
class CatalogueFile:
    """What a catalogue data file holds, read: its entries, its refused entries, its parts by name and where its
    facts were checked."""

    entries: list[Checkpoint]
    refused: list[Checkpoint]
    parts: dict[str, Any]
    provenance: list[str]
    #: a Hub-id prefix (``"Wan-AI/"``) to the license of the models published under it (``"apache-2.0"``)
    licenses: dict[str, str]


def read_catalogue(package: str, filename: str = "catalogue.json") -> CatalogueFile:
    """The data file ``filename`` of ``package`` (``dit_lora.families.sana``), each entry checked against
    :class:`Checkpoint`'s fields and types, read anew (:func:`catalogue_of` reads each family's once)."""
    name = path_of(package, filename)
    data = read(
        package, filename, ("provenance", "licenses", "entries", "refused"), shared=PARTS, required=("provenance",)
    )
    provenance = data["provenance"]
    if not isinstance(provenance, list) or not provenance or not all(isinstance(p, str) and p for p in provenance):
        raise DataFileError(
            f"{name}: 'provenance' must be a non-empty list of paragraphs saying where each fact was checked."
        )

    def listed(key: str) -> list[Checkpoint]:
        found = data.get(key, [])
        return [record(Checkpoint, e, name, f"{key}[{i}] ({_hub_id(e)})") for i, e in enumerate(found)]

    licenses = data.get("licenses", {})
    if not isinstance(licenses, dict) or not all(isinstance(v, str) and v for v in licenses.values()):
        raise DataFileError(f"{name}: 'licenses' must map a Hub-id prefix to a license name (\"apache-2.0\").")
    return CatalogueFile(listed("entries"), listed("refused"), data["parts"], provenance, licenses)


@cache
def catalogue_of(package: str) -> CatalogueFile:
    """The catalogue of the family package ``package``, read once: what :func:`dit_lora.catalogue.entries` lists
    and a family's own modules read (one copy of each entry in the process)."""
    return read_catalogue(package)


def _hub_id(found: Any) -> str:
    return str(found.get("hub_id", "no hub_id")) if isinstance(found, dict) else "not an object"
