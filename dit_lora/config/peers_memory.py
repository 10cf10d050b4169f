"""The peers' memory settings, as their published low-memory configs write them, and dit-lora's counterparts (a part
of :mod:`.peers`).

A user arriving from musubi-tuner, ai-toolkit, diffusion-pipe or OneTrainer brings the flags of a "24 GB" config: the
transformer's dtype or quantization, the text encoder's, checkpointing with its offloading variant, per-GPU batch
sizes, layer offloading. Each row was read in the file of :data:`SOURCES` it names (the 2026 snapshots of
kohya-ss/musubi-tuner, ostris/ai-toolkit, tdrussell/diffusion-pipe and Nerogar/OneTrainer); :mod:`dit_lora.config.peers` merges them
into its table, so the unknown-option message and ``docs/guides/migrating.md`` say them like every other row.
``docs/concepts/memory-plan.md`` compares those configs' published figures with ``dit-lora plan``'s. The rows are
data: ``peers_memory.json`` beside this module.
"""

from __future__ import annotations

from dataclasses import dataclass

from dit_lora.core.datafile import path_of, read, records, typed

__all__ = ["FLAGS", "SOURCES"]

_FILE = path_of("dit_lora.config", "peers_memory.json")
_DATA = read("dit_lora.config", "peers_memory.json", ("sources", "flags"), required=("sources", "flags"))


@dataclass(frozen=True)
class _Row:
    """One row of the file's ``flags``: the trainers, dit-lora's option (None: none), the note, the sources."""

    trainers: str
    option: str | None
    note: str = ""
    sources: tuple[str, ...] = ()


SOURCES: dict[str, str] = typed(_DATA["sources"], dict[str, str], _FILE, "sources")

#: option -> (the trainers that use it, dit-lora's option or None, the note, the SOURCES keys it was read in);
#: the trainers' keys of "sd-scripts library/train_util.py" and the like are :data:`dit_lora.config.peers.SOURCES`'
FLAGS: dict[str, tuple[str, str | None, str, tuple[str, ...]]] = {
    name: (row.trainers, row.option, row.note, row.sources)
    for name, row in records(_Row, _DATA["flags"], _FILE, "flags").items()
}
