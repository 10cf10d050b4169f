"""The dataset files of SimpleTuner, OneTrainer and diffusion-pipe, recognised and read as a dataset config's sets.

One table (:data:`PEERS`) names each trainer's module: how its file is recognised (``is_theirs``), the entries that
train and the notes of those that do not (``entries``), and one entry as dit-lora's set(s) (``translate``). What a
set gives under dit-lora's own names beside the trainer's keys (``weight``, ``is_reg``) passes through as it is, as
for musubi-tuner's and ai-toolkit's files (:mod:`.peer_datasets`). The docs' migration guide maps each key.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from dit_lora.config import peer_diffusion_pipe, peer_onetrainer, peer_simpletuner
from dit_lora.config.peer_datasets import Derived
from dit_lora.core.errors import UserError

#: each trainer's file -> its module's (recogniser, the entries that train, one entry translated, the keys it reads)
PEERS: dict[str, tuple[Callable[[Any], bool], Callable, Callable, frozenset[str]]] = {
    peer_simpletuner.SIMPLETUNER: (
        peer_simpletuner.is_theirs,
        peer_simpletuner.backends,
        peer_simpletuner.translate,
        peer_simpletuner.MAPPED,
    ),
    peer_onetrainer.ONETRAINER: (
        peer_onetrainer.is_theirs,
        peer_onetrainer.concepts,
        peer_onetrainer.translate,
        peer_onetrainer.MAPPED,
    ),
    peer_diffusion_pipe.DIFFUSION_PIPE: (
        peer_diffusion_pipe.is_theirs,
        peer_diffusion_pipe.directories,
        peer_diffusion_pipe.translate,
        peer_diffusion_pipe.MAPPED,
    ),
}


@dataclass
class PeerSets:
    """A peer's file as read: whose it is, each set as ``(where, options, the file's names of them, Derived)``, and
    the notes of what was left out."""

    flavour: str
    sets: list[tuple[str, dict[str, Any], dict[str, str], Derived]] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)


def flavour_of(data: Any) -> str | None:
    """Whose file ``data`` (parsed) is, of :data:`PEERS`; None: none of theirs."""
    return next((name for name, (theirs, *_) in PEERS.items() if theirs(data)), None)


def read_peer(data: Any, path: Path, *, video: bool, own: frozenset[str]) -> PeerSets | None:
    """``data`` read as the sets of its trainer's file, or None when it is none of :data:`PEERS`' files. A key in
    ``own`` (dit-lora's set keys) that the trainer does not read passes through; one that its translation also sets
    is refused."""
    flavour = flavour_of(data)
    if flavour is None:
        return None
    _, entries, translate, mapped = PEERS[flavour]
    listed, notes = entries(data, path)
    read = PeerSets(flavour, notes=list(notes))
    for where, entry in listed:
        kept = {k: v for k, v in entry.items() if k in own and k not in mapped}
        theirs = {k: v for k, v in entry.items() if k not in kept}
        try:
            translated, left = translate(theirs, video=video, where=where)
        except (TypeError, ValueError, KeyError):
            raise UserError(
                f"{where}: a value of this {flavour} entry is not of the kind {flavour} takes ({theirs!r}); fix it."
            ) from None
        read.notes += left
        for options, keys, derived in translated:
            clash = sorted(set(options) & set(kept))
            if clash:
                raise UserError(
                    f"{where} gives `{clash[0]}` and also {flavour}'s key that means it; keep one of the two."
                )
            read.sets.append((where, _numbered({**options, **kept}, read), keys, derived))
    return read


def _numbered(options: dict[str, Any], read: PeerSets) -> dict[str, Any]:
    """``options`` with a name the sets read so far do not have: the trainers take two entries of one name (two
    OneTrainer concepts, two SimpleTuner backends of one folder), dit-lora names its sets apart (``name-2``)."""
    name = options.get("name")
    taken = {str(o.get("name")) for _, o, _, _ in read.sets if o.get("name")}
    if not name or str(name) not in taken:
        return options
    number = 2
    while f"{name}-{number}" in taken:
        number += 1
    return {**options, "name": f"{name}-{number}"}
