"""LLaMA-Factory's options that a video-LLM user brings, and dit-lora's counterparts (a part of :mod:`.peers`).

LLaMA-Factory trains the same video LLMs (LLaVA-NeXT-Video, Qwen2.5-VL, Qwen3-VL, InternVL) from a YAML of its
``ModelArguments``, ``DataArguments``, ``FinetuningArguments`` and transformers' ``Seq2SeqTrainingArguments``. Each
row was read in the file of :data:`SOURCES` it names (the 2026 snapshot of hiyouga/LLaMA-Factory); the
tables are data, ``peers_llamafactory.json`` beside this module;
:mod:`dit_lora.config.peers` merges them into its table, so the unknown-option message and
``docs/guides/migrating.md`` say them like every other peer's.
"""

from __future__ import annotations

from dataclasses import dataclass

from dit_lora.core.datafile import path_of, read, records, typed

__all__ = ["CAVEATS", "FLAGS", "SAME_NAMES", "SOURCES", "TRAINER"]

_FILE = path_of("dit_lora.config", "peers_llamafactory.json")
_KEYS = ("trainer", "sources", "flags", "same_names", "caveats")
_DATA = read("dit_lora.config", "peers_llamafactory.json", _KEYS, required=_KEYS)


@dataclass(frozen=True)
class _Row:
    """One row of the file's ``flags``: dit-lora's option (None: none), the note, the SOURCES keys it was read in."""

    option: str | None
    note: str = ""
    sources: tuple[str, ...] = ()


#: how the rows name the trainer (the word of ``peers.PEERS`` that finds them)
TRAINER: str = typed(_DATA["trainer"], str, _FILE, "trainer")

SOURCES: dict[str, str] = typed(_DATA["sources"], dict[str, str], _FILE, "sources")

#: LLaMA-Factory's option -> (dit-lora's option or None, the note, the SOURCES keys it was read in)
FLAGS: dict[str, tuple[str | None, str, tuple[str, ...]]] = {
    name: (row.option, row.note, row.sources) for name, row in records(_Row, _DATA["flags"], _FILE, "flags").items()
}

#: LLaMA-Factory options dit-lora spells the same way (same meaning unless :data:`CAVEATS` says otherwise)
SAME_NAMES: tuple[str, ...] = typed(_DATA["same_names"], tuple[str, ...], _FILE, "same_names")

#: same spelling, another meaning
CAVEATS: dict[str, str] = typed(_DATA["caveats"], dict[str, str], _FILE, "caveats")
