#!/usr/bin/env python
"""The family guides' fit tables: what `dit-lora plan ID --gpu_memory SIZE` answers for every catalogued checkpoint.

For each catalogued checkpoint at the defaults a run gives it (one process, CUDA), the predicted peak as given and,
per card size, the ladder's answer (``dit_lora/plan/ladder.py``): *fits* (with the 15% headroom the plan keeps),
*fits, narrowly* (under the size, inside that headroom), else the flags of the fastest configuration the plan finds
that fits and its predicted peak, or *no* with the lowest peak the ladder reaches. Nothing is downloaded: the
catalogue holds the configs.

    python benchmarks/plan/fit_tables.py [--family wan] [--sizes 16,24,48,80] [--json out.json] > tables.md
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


def cell(plan, size_gib: float) -> tuple[str, dict]:
    """The table's cell for ``plan`` on ``size_gib`` GiB, and the ladder as JSON."""
    from dit_lora.plan import ladder

    capacity = int(size_gib * GIB)
    peak = plan.peak_memory_bytes
    if peak * (1 + ladder.UNDER_PREDICTION) <= capacity:
        return "fits", {"fits": True}
    if peak <= capacity:
        return "fits, narrowly", {"fits": True, "narrowly": True}
    found = ladder.climb(plan, capacity)
    data = found.as_dict()
    target = found.chosen or found.closest
    if found.chosen is None:
        return f"no (lowest {target.peak / GIB:.1f} GiB)", data
    flags = " ".join(found.launch_flags(target) + found.flags())  # the recommended plan: a narrow swap gets headroom
    return f"`{flags}` ({found.recommended.peak_memory_bytes / GIB:.1f} GiB)", data


def main() -> int:
    from dit_lora.catalogue import entries

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--family", default=None, help="only this family's entries")
    parser.add_argument("--sizes", default="16,24,48,80", help="card sizes in GiB (GB as `dit-lora plan` reads it)")
    parser.add_argument("--json", default=None, help="also write every ladder as JSON to this file")
    args = parser.parse_args()
    sizes = [float(s) for s in args.sizes.split(",")]
    head = " | ".join(f"{s:g} GB" for s in sizes)
    print(f"| checkpoint | caching phase | training phase | predicted peak | {head} |")
    print("|---|---:|---:|---:|" + "---|" * len(sizes))
    out = {}
    for entry in entries(args.family):
        try:
            plan, _ = plan_entry(entry)
        except Exception as err:  # a row that cannot be planned says why; the others still print
            print(f"| `{entry.hub_id}` | plan failed: {type(err).__name__}: {err} |", flush=True)
            continue
        cells = [cell(plan, s) for s in sizes]
        cache = f"{plan.cache_phase_bytes / GIB:.2f} GiB" if plan.cache_phase_bytes else "-"
        print(
            f"| `{entry.hub_id}` | {cache} | {plan.train_phase_bytes() / GIB:.2f} GiB | "
            f"**{plan.peak_memory_bytes / GIB:.2f} GiB** | " + " | ".join(c for c, _ in cells) + " |",
            flush=True,
        )
        out[entry.hub_id] = {f"{s:g}": data for s, (_, data) in zip(sizes, cells)}
    if args.json:
        Path(args.json).write_text(json.dumps(out, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
