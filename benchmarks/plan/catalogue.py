"""The memory plan of every catalogued checkpoint at the defaults a run gives it, as a Markdown table.

Nothing is downloaded: each entry's published configs come from the catalogue. Each row is what
``dit-lora plan --pretrained_model_name_or_path ID`` predicts for one process on a CUDA device (no
Python-process term), at the catalogue's defaults (resolution or video size, batch, rank, checkpointing).

    python benchmarks/plan/catalogue.py [--family sana] [--json out.json] > table.md
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time

os.environ.setdefault("HF_HUB_OFFLINE", "1")

#: peers' published peak memory for the same work, where one exists (see ../shared/ANCHORS.md "Published figures")
PUBLISHED = {
    "THUDM/CogVideoX-2b": "12.9-13.1 GB (A100, 49x480x720, batch 1, checkpointing, rank 16-256: diffusers/finetrainers tables)",
    "THUDM/CogVideoX-5b": "19.7-22.1 GB (same settings)",
    "Efficient-Large-Model/Sana_1600M_1024px_BF16_diffusers": "23.7 GiB (SimpleTuner, LoKr rank 128, batch 4, 1024 px, H100)",
}


def plan_entry(entry):
    from dit_lora.catalogue.defaults import choose_defaults
    from dit_lora.config import TrainConfig
    from dit_lora.registry import get_family
    from dit_lora.plan import make_plan

    cfg = TrainConfig(family=entry.family, pretrained_model_name_or_path=entry.hub_id,
                      explicit=frozenset({"family", "pretrained_model_name_or_path"}))
    family = get_family(entry.family)
    chosen = choose_defaults(cfg, family)
    cfg = chosen.config
    # the kept step traces (dit_lora/plan/trace_cache.py): a second pass over the catalogue reads them
    return make_plan(cfg, family, device="cuda", entry=chosen.entry, cache=True), cfg


def row(entry, plan, cfg) -> str:
    gib = lambda n: f"{n / 2**30:.1f}"  # noqa: E731
    step = max((s for s in plan.steps if s.checkpointing == plan.checkpointing), key=lambda s: s.activation_bytes)
    setting = (f"{step.bucket}, batch {plan.train_batch_size}, rank {cfg.lora.rank}, "
               f"checkpointing {'on' if plan.checkpointing else 'off'}")
    cache = gib(plan.cache_phase_bytes) if plan.cache_phase_bytes else "-"
    return (f"| `{entry.hub_id}` | {setting} | {gib(plan.weights['model'])} | {gib(plan.train_phase_bytes())} | "
            f"{cache} | {gib(plan.peak_memory_bytes)} | {plan.flops_per_update() / 1e12:.0f} | "
            f"{PUBLISHED.get(entry.hub_id, '-')} |")


def main() -> int:
    from dit_lora.catalogue import entries

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--family", default=None, help="only this family's entries")
    parser.add_argument("--json", default=None, help="also write every plan as JSON to this file")
    args = parser.parse_args()
    print("| Hub id | setting (catalogue defaults) | transformer / LM weights GiB | training phase GiB | "
          "caching phase GiB | predicted peak GiB | TFLOP per update | published peak (peers) |")
    print("|---|---|---|---|---|---|---|---|")
    plans = {}
    for entry in entries(args.family):
        start = time.perf_counter()
        try:
            plan, cfg = plan_entry(entry)
        except Exception as err:  # a row that cannot be planned says why; the others still print
            print(f"| `{entry.hub_id}` | plan failed: {type(err).__name__}: {err} | | | | | | |", flush=True)
            continue
        print(row(entry, plan, cfg), flush=True)
        plans[entry.hub_id] = {**plan.as_dict(), "seconds": round(time.perf_counter() - start, 1)}
        print(f"{entry.hub_id}: planned in {plans[entry.hub_id]['seconds']} s", file=sys.stderr, flush=True)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(plans, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
