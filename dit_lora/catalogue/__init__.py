"""The catalogue of checkpoints dit-lora supports, and the recipe defaults each one gets.

``entries()`` lists them (``dit-lora models`` prints it); ``match`` finds the entry whose published
config a model folder has; :func:`~dit_lora.catalogue.defaults.resolve_defaults` applies an entry's
defaults to a run. One data file per family package (``dit_lora/families/<name>/catalogue.json``, its package named
by the family's registry entry; :func:`data_files` lists them), each citing where its values were checked (its
``provenance``).
"""

from __future__ import annotations

from dit_lora.catalogue.entry import Checkpoint, ConfigReader, lookup
from dit_lora.catalogue.files import catalogue_of
from dit_lora.modelfiles.pipeline_files import is_local
from dit_lora.registry import entries as family_entries


def data_files() -> tuple[str, ...]:
    """The packages whose ``catalogue.json`` lists checkpoints, one per registered family that has one, in listing
    order.

    Derived from the family registry (each :class:`~dit_lora.registry.FamilyEntry` names its ``catalogue``
    package).
    """
    return tuple(dict.fromkeys(e.catalogue for e in family_entries() if e.catalogue))


_DTYPES = {"F16": "fp16", "BF16": "bf16", "F32": "fp32"}


def entries(family: str | None = None) -> list[Checkpoint]:
    """Every catalogued checkpoint (those serving ``family`` when given: :attr:`Checkpoint.families`), once each,
    in the order of :func:`data_files`."""
    every = [e for package in data_files() for e in catalogue_of(package).entries]
    return [e for e in every if family is None or family in e.families]


def by_hub_id(hub_id: str) -> Checkpoint | None:
    """The entry published under ``hub_id`` (case-insensitive), if catalogued."""
    wanted = hub_id.lower()
    return next((e for e in entries() if e.hub_id.lower() == wanted), None)


def license_of(family: str, model: str) -> str | None:
    """The license of the base model ``model`` (a Hub id) as ``family``'s catalogue states it for the Hub ids
    starting with a prefix of its ``licenses`` (the longest such prefix, in any case); None for a local folder or a
    model no prefix names, or a family that is not registered (a model card then states no license)."""
    package = next((e.catalogue for e in family_entries() if family in e.names), None)
    if package is None or is_local(model):
        return None
    found = [(len(p), lic) for p, lic in catalogue_of(package).licenses.items() if model.lower().startswith(p.lower())]
    return max(found)[1] if found else None


def refused() -> list[Checkpoint]:
    """The published checkpoints dit-lora recognises and refuses (each data file's ``refused`` list, with its
    :attr:`Checkpoint.refusal` paragraph), in the order of :func:`data_files`."""
    return [e for package in data_files() for e in catalogue_of(package).refused]


def refused_match(read: ConfigReader, hub_id: str | None = None) -> Checkpoint | None:
    """The refused entry published as ``hub_id`` or whose signature the model's configs have, if any."""
    wanted = (hub_id or "").lower()
    return next((e for e in refused() if e.hub_id.lower() == wanted or e.matches(read)), None)


def match(
    family: str, read: ConfigReader, stored_dtype: str | None = None, hub_id: str | None = None
) -> Checkpoint | None:
    """The entry of ``family`` whose signature the model's configs have.

    Among entries that share a signature, the one whose layer count (``depth``) the model has wins (Sana 1.5
    1.6B vs 4.8B), then the one whose weights' dtype is ``stored_dtype`` (a safetensors dtype such as
    ``"BF16"``, or the ``--variant``; Sana 1600M 1024 px in fp16 and in BF16). A remaining tie goes to the
    first entry, which is harmless because such twins share their defaults. A Hub id that names one of the
    matching entries picks that one.
    """
    found = [e for e in entries(family) if e.matches(read)]
    named = [e for e in found if hub_id and e.hub_id.lower() == hub_id.lower()]
    if named:
        return named[0]
    dtype = _DTYPES.get((stored_dtype or "").upper(), (stored_dtype or "").lower())

    def rank(entry: Checkpoint) -> tuple[int, int]:
        return len(entry.depth_differences(read)), int(entry.stored_dtype != dtype)

    return min(found, key=rank) if found else None


__all__ = [
    "Checkpoint",
    "ConfigReader",
    "by_hub_id",
    "data_files",
    "entries",
    "license_of",
    "lookup",
    "match",
    "refused",
    "refused_match",
]
