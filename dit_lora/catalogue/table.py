"""``dit-lora models``: the catalogue as a table (or JSON), with the defaults each checkpoint gets."""

from __future__ import annotations

import json
from dataclasses import asdict

from dit_lora.catalogue import Checkpoint, entries, refused


def _number(value) -> str:
    return (
        f"{value:.0e}".replace("e-0", "e-")
        if isinstance(value, float) and 0 < abs(value) < 0.01  # 0.0 (a guidance scale) reads 0, not 0e+00
        else f"{value:g}"
        if isinstance(value, float)
        else str(value)
    )


def _defaults_text(entry: Checkpoint) -> str:
    return ", ".join(f"{k} {_number(v)}" for k, v in entry.defaults.items())


def format_table(family: str | None = None) -> str:
    """One row per catalogued checkpoint: Hub id, recipe family, trained size, text length, dtype, defaults."""
    rows = [("Hub id", "family", "trained at", "text", "weights", "defaults")]
    for e in entries(family):
        rows.append((e.hub_id, e.family, e.trained_text(), str(e.text_length), e.stored_dtype, _defaults_text(e)))
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]) - 1)]
    lines = ["  ".join(cell.ljust(w) for cell, w in zip(r[:-1], widths)) + "  " + r[-1] for r in rows]
    lines.insert(1, "-" * len(lines[0]))
    lines.append("")
    lines.append(
        "A model folder with one of these configs (a local copy, a fine-tune) gets the same defaults; "
        "flags you give win. Sources: dit_lora/families/*/catalogue.py."
    )
    turned_away = [e for e in refused() if family is None or family in e.families]
    if turned_away:
        lines.append("")
        lines.append("Recognised and refused (a run on one stops at start and says why, and what to train instead):")
        lines.extend(f"  {e.hub_id}  {e.title}: {e.notes}" for e in turned_away)
    return "\n".join(lines)


def as_json(family: str | None = None) -> str:
    """The full entries (configs, sources and all) as JSON."""
    return json.dumps([asdict(e) for e in entries(family)], indent=2)
