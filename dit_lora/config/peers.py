"""Flags of other trainers that users bring along, and what dit-lora calls them.

:data:`PEER_FLAGS` maps an option name of diffusers' training examples, kohya's sd-scripts and musubi-tuner,
SimpleTuner and ai-toolkit (its YAML keys) to the dit-lora option of the same meaning (or None: none) with a
note, and the file of the peer's source it was read from (:data:`SOURCES`). The unknown-option message
(:func:`peer_hint`) reads it before any "did you mean" guess, so a flag of another trainer is never matched to a
look-alike with another meaning (``--instance_prompt`` is not ``--validation_prompt``). :data:`SAME_NAMES` lists
the peers' options that dit-lora spells the same way. ``docs/guides/migrating.md`` holds the tables
:func:`migration_tables` writes from both; tests keep the page, this table and dit-lora's options in agreement.
The tables are data: ``peers.json`` beside this module (``peers_llamafactory.json``, ``peers_memory.json``).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from dit_lora.config import peers_llamafactory as llamafactory
from dit_lora.config import peers_memory as memory
from dit_lora.config.owners import owners
from dit_lora.core.datafile import path_of, read, records, typed


@dataclass(frozen=True)
class Peer:
    """Another trainer's option: who uses it, the dit-lora option of the same meaning (None: none), a note, and
    where it was read (keys of :data:`SOURCES`)."""

    trainers: str
    option: str | None
    note: str = ""  #: what to know beside the counterpart, or why there is none
    fallback: str = ""  #: said while ``option`` is not (yet) an option of the run
    sources: tuple[str, ...] = ()  #: the peer files that define it (:data:`SOURCES` keys)
    #: the same meaning under another name in some families: (dit-lora option, note), said before ``option`` when
    #: the run has it (diffusers' FLUX.2 script's --guidance_scale is the guidance FLUX.2 [dev] trains at)
    also: tuple[tuple[str, str], ...] = ()


_FILE = path_of("dit_lora.config", "peers.json")
_KEYS = ("sources", "peers", "flags", "same_names", "same_name_caveats")
_DATA = read("dit_lora.config", "peers.json", _KEYS, required=_KEYS)

#: the peers' files each entry was checked against (the snapshot read for docs/guides/migrating.md, 2026)
SOURCES: dict[str, str] = {
    **typed(_DATA["sources"], dict[str, str], _FILE, "sources"),
    **llamafactory.SOURCES,
    **memory.SOURCES,
}

#: the peers, in the page's order: key -> (title, the words of ``Peer.trainers`` that name it)
PEERS: dict[str, tuple[str, tuple[str, ...]]] = typed(
    _DATA["peers"], dict[str, tuple[str, tuple[str, ...]]], _FILE, "peers"
)

#: another trainer's option name -> its dit-lora counterpart (only names that are not dit-lora options themselves);
#: the file groups the rows by peer (``flags``: section -> name -> row)
PEER_FLAGS: dict[str, Peer] = {
    name: peer
    for section, rows in typed(_DATA["flags"], dict[str, Any], _FILE, "flags").items()
    for name, peer in records(Peer, rows, _FILE, f"flags.{section}").items()
}

# LLaMA-Factory's, kept in their own module (dit_lora/config/peers_llamafactory.py)
PEER_FLAGS.update(
    {
        name: Peer(llamafactory.TRAINER, option, note, sources=sources)
        for name, (option, note, sources) in llamafactory.FLAGS.items()
    }
)
# the peers' memory settings, kept in their own module (dit_lora/config/peers_memory.py)
PEER_FLAGS.update(
    {
        name: Peer(trainers, option, note, sources=sources)
        for name, (trainers, option, note, sources) in memory.FLAGS.items()
    }
)

#: peer options dit-lora spells the same way (same meaning unless the page says otherwise), by peer (PEERS keys).
#: diffusion-pipe's were read in examples/main_example.toml ("dp"; rank: its [adapter] table; its `compile` is a
#: boolean: dit-lora's --compile blocks/full); OneTrainer's in modules/util/config/TrainConfig.py ("ot-config": the
#: last two are keys of a model part, the transformer)
SAME_NAMES: dict[str, tuple[str, ...]] = {
    **typed(_DATA["same_names"], dict[str, tuple[str, ...]], _FILE, "same_names"),
    "llamafactory": llamafactory.SAME_NAMES,
}

#: same spelling, another meaning: the peer's sense, and what to pass to dit-lora
SAME_NAME_CAVEATS: dict[str, str] = {
    **typed(_DATA["same_name_caveats"], dict[str, str], _FILE, "same_name_caveats"),
    **llamafactory.CAVEATS,
}


def peer_hint(name: str, valid: Iterable[str]) -> str | None:
    """The sentence for ``name``, another trainer's option: dit-lora's counterpart (in ``valid``, the run's options;
    or another family's), or that there is none and what to do; None when ``name`` is no known peer option."""
    name = name.lstrip("-")
    peer = PEER_FLAGS.get(name)
    if peer is None:
        return None
    said = f" ({peer.note})" if peer.note else ""
    for option, note in peer.also:  # this family's own name for the meaning
        if option in set(valid):
            return f"--{name} comes from {peer.trainers}; dit-lora's option for this family is --{option} ({note})."
    if peer.option is not None and peer.option in set(valid):
        return f"--{name} comes from {peer.trainers}; dit-lora's option is --{peer.option}{said}."
    holders = owners(peer.option) if peer.option else []
    if holders:
        return (
            f"--{name} comes from {peer.trainers}; dit-lora's option is --{peer.option}, an option of "
            f"--family {' or '.join(holders)}{said}."
        )
    return f"--{name} ({peer.trainers}) has no dit-lora equivalent: {peer.fallback or peer.note}."


def peer_names(peer: str) -> list[str]:
    """The :data:`PEER_FLAGS` names ``peer`` (a :data:`PEERS` key) uses, sorted."""
    words = PEERS[peer][1]
    return sorted(name for name, entry in PEER_FLAGS.items() if any(w in entry.trainers for w in words))


def _cell(text: str) -> str:
    return text.replace("|", "\\|")


def migration_table(peer: str) -> str:
    """The Markdown table of ``peer``'s (a :data:`PEERS` key) options and dit-lora's counterparts, as
    ``docs/guides/migrating.md`` holds it (its rows: their option, dit-lora's or "none: ...", the source)."""
    rows = ["| their option | dit-lora | read in |", "|---|---|---|"]
    for name in peer_names(peer):
        entry = PEER_FLAGS[name]
        if entry.option is None:
            ours = f"none: {entry.note}"
        else:
            holders = owners(entry.option)
            ours = f"`--{entry.option}`" + (f" (--family {', '.join(holders)})" if holders else "")
            ours += f": {entry.note}" if entry.note else ""
        for option, note in entry.also:
            ours += f"; `--{option}` (--family {', '.join(owners(option))}): {note}"
        where = "; ".join(SOURCES[key] for key in entry.sources)
        rows.append(f"| `{name}` | {_cell(ours)} | {_cell(where)} |")
    return "\n".join(rows)


def same_names_line(peer: str) -> str:
    """The sentence listing ``peer``'s options that dit-lora spells the same way."""
    names = ", ".join(f"`--{n}`" for n in SAME_NAMES[peer])
    return f"Same name in dit-lora: {names}."


def migration_tables() -> str:
    """Every peer's table and same-name line, the text between the page's generated markers."""
    parts = []
    for peer, (title, _) in PEERS.items():
        parts += [f"### {title}", "", same_names_line(peer), "", migration_table(peer), ""]
    parts += ["### Same name, other meaning", ""]
    parts += [f"- `--{name}`: {text}." for name, text in SAME_NAME_CAVEATS.items()]
    return "\n".join(parts) + "\n"


if __name__ == "__main__":  # python -m dit_lora.config.peers: the tables of docs/guides/migrating.md
    print(migration_tables(), end="")
