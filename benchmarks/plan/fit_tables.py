#!/usr/bin/env python
"""The family guides' fit tables: what `dit-lora plan ID --gpu_memory SIZE` answers for every catalogued checkpoint.

For each catalogued checkpoint at the defaults a run gives it (one process, CUDA), the predicted peak as given and,
per card size, the ladder's answer (``dit_lora/plan/ladder.py``), each with the host memory (RAM) its configuration
needs (``dit_lora/plan/host.py``): *fits* (with the plan's worst measured GPU error,
``ladder.GPU_ERROR``, kept free), *fits, narrowly* (under the size, inside that margin; with the flags that keep it
where a rung does), else the flags of the fastest configuration the plan finds that fits with the margin and its
predicted peak, *fits, narrowly:* and the flags of the lowest where none keeps it (never within 5% of the card), or
*no* with the lowest peak the ladder reaches. Nothing is downloaded: the
catalogue holds the configs.

    python benchmarks/plan/fit_tables.py [--family wan] [--sizes 16,24,48,80] [--json out.json] > tables.md
    python benchmarks/plan/fit_tables.py --update-guides    # every guide's table, rows for the ids it lists
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from benchmarks.plan.catalogue import plan_entry  # noqa: E402

GIB = 2**30


def host_note(plan) -> str:
    """``host N GiB``: the host memory (RAM) a process of ``plan`` needs at its peak on an accelerator
    (``dit_lora/plan/host.py``: the files mapped while loading, copies made at load, pinned memory, the process)."""
    from dit_lora.plan import host

    return f"host {host.peak_bytes(plan) / GIB:.0f} GiB"


def cell(plan, size_gib: float) -> tuple[str, dict]:
    """The table's cell for ``plan`` on ``size_gib`` GiB, and the ladder as JSON: the words of `dit-lora plan`'s
    answer (``ladder.GPU_ERROR`` kept free; *fits, narrowly* inside it, with the flags that keep it where a rung does),
    with the host memory of the configuration it names (:func:`host_note`)."""
    from dit_lora.plan import ladder

    capacity = int(size_gib * GIB)
    peak = plan.peak_memory_bytes
    if peak <= ladder.room(capacity):
        return f"fits ({host_note(plan)})", {"fits": True}
    found = ladder.climb(plan, capacity)
    data = found.as_dict()
    target = found.chosen or found.closest
    flags = " ".join(found.launch_flags(target) + found.flags())
    proposal = f"`{flags}` ({found.recommended.peak_memory_bytes / GIB:.1f} GiB; {host_note(found.recommended)})"
    if peak <= capacity:  # as given, inside the plan's error: said so, with the flags that keep it free
        keeps = f"; {proposal} keeps the margin" if found.chosen is not None and found.flags() else ""
        return f"fits, narrowly ({host_note(plan)}){keeps}", {**data, "fits": True, "narrowly": True}
    if found.chosen is not None:
        return proposal, data
    if found.narrow is not None:
        return f"fits, narrowly: {proposal}", data
    return f"no (lowest {target.peak / GIB:.1f} GiB)", data


HEADER = "| checkpoint | caching phase | training phase | predicted peak |"
#: the video LLMs' tables (no caching phase: the peak is the training phase)
SHORT_HEADER = "| checkpoint | predicted peak (training) |"


def table_row(entry, sizes: list[float], short: bool = False) -> tuple[str, dict]:
    """One checkpoint's row of the fit table (``short``: :data:`SHORT_HEADER`'s columns), and its ladders as JSON."""
    try:
        plan, _ = plan_entry(entry)
    except Exception as err:  # a row that cannot be planned says why; the others still print
        return f"| `{entry.hub_id}` | plan failed: {type(err).__name__}: {err} |", {}
    cells = [cell(plan, s) for s in sizes]
    cache = f"{plan.cache_phase_bytes / GIB:.2f} GiB" if plan.cache_phase_bytes else "-"
    phases = "" if short else f"{cache} | {plan.train_phase_bytes() / GIB:.2f} GiB | "
    text = (
        f"| `{entry.hub_id}` | {phases}**{plan.peak_memory_bytes / GIB:.2f} GiB** | "
        + " | ".join(c for c, _ in cells)
        + " |"
    )
    return text, {f"{s:g}": data for s, (_, data) in zip(sizes, cells)}


def update_guides(guides: Path) -> list[str]:
    """Rewrite the rows of every fit table in ``guides`` (the Markdown files whose table starts with
    :data:`HEADER` or :data:`SHORT_HEADER`) for the checkpoints each lists, in its order, at the card sizes its header
    names (``| 24 GB |``); returns the files changed."""
    import re

    from dit_lora.catalogue import by_hub_id

    changed = []
    for path in sorted(guides.glob("*.md")):
        lines = path.read_text().splitlines(keepends=True)
        out, i = [], 0
        while i < len(lines):
            out.append(lines[i])
            short = lines[i].startswith(SHORT_HEADER)
            if not (short or lines[i].startswith(HEADER)):
                i += 1
                continue
            sizes = [float(size) for size in re.findall(r"\| (\d+(?:\.\d+)?) GB", lines[i])]
            out.append(lines[i + 1])  # the alignment row
            i += 2
            while i < len(lines) and lines[i].startswith("| `"):
                hub_id = re.match(r"\| `([^`]+)`", lines[i]).group(1)
                row = table_row(by_hub_id(hub_id), sizes, short)[0].split("|")
                row[1] = lines[i].split("|")[1]  # the guide's own first cell: a note beside the id stays
                out.append("|".join(row) + "\n")
                i += 1
        if out != lines:
            path.write_text("".join(out))
            changed.append(str(path))
    return changed


def main() -> int:
    from dit_lora.catalogue import entries

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--family", default=None, help="only this family's entries")
    parser.add_argument("--sizes", default="16,24,48,80", help="card sizes in GiB (GB as `dit-lora plan` reads it)")
    parser.add_argument("--json", default=None, help="also write every ladder as JSON to this file")
    parser.add_argument(
        "--update-guides", action="store_true", help="rewrite the fit tables in docs/guides (at their own sizes)"
    )
    args = parser.parse_args()
    sizes = [float(s) for s in args.sizes.split(",")]
    if args.update_guides:
        guides = Path(__file__).resolve().parents[2] / "docs" / "guides"
        for path in update_guides(guides):
            print(f"updated {path}")
        return 0
    head = " | ".join(f"{s:g} GB" for s in sizes)
    print(f"{HEADER} {head} |")
    print("|---|---:|---:|---:|" + "---|" * len(sizes))
    out = {}
    for entry in entries(args.family):
        text, data = table_row(entry, sizes)
        print(text, flush=True)
        if data:
            out[entry.hub_id] = data
    if args.json:
        Path(args.json).write_text(json.dumps(out, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
