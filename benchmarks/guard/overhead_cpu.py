#!/usr/bin/env python
"""CPU benchmark: what the finite-step guard (``dit_lora/training/guard.py``) costs per training step.

    python benchmarks/guard/overhead_cpu.py --out benchmarks/guard/overhead_cpu.json

Two measurements, on the small demo Sana (``--demo_size small``, 256 px, batch 4, LoRA rank 8 on
to_q/to_k/to_v/to_out.0, bf16 autocast, fp32 LoRA weights, fused AdamW, max_grad_norm 1: the
``small`` dit-lora run of ``sana/vs_example_cpu.py``, whose helpers this script imports):

1. **End to end.** ``recipes/sana_lora.py`` with the settings of ``sana/vs_example_cpu.py``'s ``dit_lora_cmd``
   in fresh child processes under ``benchmarks/common/step_timer.py`` (per-step times from the step progress), in
   three variants: ``guard`` (the default, ``--finite_guard true``), ``guard+spikes``
   (``--skip_loss_spikes 6``) and ``no-guard`` (``--finite_guard false``). ``--repeats``
   interleaved rounds (the variant order rotates from round to round), the same quiet-machine
   wait and clean-step rule as ``sana/vs_example_cpu.py``. Reported per variant: median over the
   pooled clean steps, the mean step (the whole timed window over its steps, so it includes the
   once-per-10-steps guard check), per-round medians; per guard variant the overhead vs
   ``no-guard`` as pooled-median ratio, a bootstrap 95% interval of that ratio and the spread of
   the per-round paired ratios, so a reader can see whether a ~1-2% difference is resolvable.

2. **Isolated per-step cost.** In this process, the small transformer is loaded and given LoRA
   the way ``dit_lora.training.loop.train`` does it (``family.load_components``,
   ``trainables.add_lora``, ``cast_trainable_to_fp32``, ``build_param_groups``,
   ``optim.make_optimizer`` (fused AdamW on CPU), ``make_lr_scheduler``, config from
   ``parse_config`` with the same command line), the trainable parameters get random gradients,
   and ``torch.utils.benchmark.Timer.blocked_autorange`` (with the training's thread count) times
   one optimizer update in each variant, each with its own optimizer over the same parameters:

   * ``baseline``: ``clip_grad_norm_ + optimizer.step() + lr_scheduler.step()`` (a plain trainer);
   * ``guard off``: ``clip + StepGuard(enabled=False).step(...)`` (``--finite_guard false``);
   * ``guard on``: ``clip + StepGuard(enabled=True).step(...)`` (the default);
   * ``guard on + spikes``: the same with ``spike_sigma=6`` (``--skip_loss_spikes 6``);
   * ``check``: what the loop does once per check interval (10 steps) on the host:
     ``guard.read()`` plus the snapshot of trainable parameters and optimizer state that
     ``Recovery.at_check`` takes after a clean window (it does so with the guard on *and* off).

   Variants are interleaved over ``--isolated_rounds`` rounds; each round is flagged clean when
   other processes used fewer than ``--clean_cores`` cores during it. Reported: the median over
   clean rounds of each variant's per-round median (µs), the increment over ``baseline`` with
   the min..max of the per-round paired differences, and that increment as % of the end-to-end
   step time (``no-guard`` median from part 1).

The counters are read after every isolated measurement: a timed step must not have been skipped
(a skipped fused AdamW step returns early and would look cheaper).
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

BENCH = Path(__file__).resolve().parent
REPO = BENCH.parents[1]
sys.path.insert(0, str(REPO))

# reused: assets, command line, child runs, load monitoring
from benchmarks.common.cpu_harness import child_environment  # noqa: E402
from benchmarks.sana import vs_example_cpu as sana_cpu  # noqa: E402

CONFIG, RESOLUTION = "small", 256
E2E_VARIANTS = {
    "guard": ["--finite_guard", "true"],
    "guard+spikes": ["--finite_guard", "true", "--skip_loss_spikes", "6"],
    "no-guard": ["--finite_guard", "false"],
}
E2E_BASE = "no-guard"
ISO_VARIANTS = ("baseline", "guard off", "guard on", "guard on + spikes")
CHECK_INTERVAL = 10  # the loop's check interval with the demo config (min(10, validation_steps, max_consecutive_skips))


def log(msg: str) -> None:
    print(msg, flush=True)


def _bootstrap_ratio(num: list[float], den: list[float], n: int = 2000, seed: int = 0) -> tuple[float, float]:
    """95% percentile-bootstrap interval of median(num) / median(den), resampling steps."""
    rng = random.Random(seed)
    ratios = sorted(statistics.median(rng.choices(num, k=len(num))) / statistics.median(rng.choices(den, k=len(den)))
                    for _ in range(n))
    return ratios[int(0.025 * n)], ratios[int(0.975 * n) - 1]


# --------------------------------------------------------------------------------------------
# part 1: end to end
# --------------------------------------------------------------------------------------------
def run_e2e(args, work: Path, env: dict) -> tuple[list[dict], list[dict]]:
    sana_cpu.build_assets(work, {CONFIG: RESOLUTION}, env)
    runs: list[dict] = []
    names = list(E2E_VARIANTS)
    for rnd in range(args.repeats):
        order = names[rnd % len(names):] + names[: rnd % len(names)]  # rotate: no variant always runs first
        for variant in order:
            name = f"guard-{CONFIG}-{variant.replace('+', '_')}-r{rnd}"
            out = work / "runs" / name
            shutil.rmtree(out, ignore_errors=True)
            argv = sana_cpu.dit_lora_cmd(work, CONFIG, RESOLUTION, args.steps, out) + E2E_VARIANTS[variant]
            log(f"[round {rnd + 1}/{args.repeats}] {CONFIG} ({RESOLUTION} px, {args.steps} steps) {variant}")
            quiet = sana_cpu.wait_for_quiet(args.quiet_cores, args.max_wait_s, log)
            result = sana_cpu.run_once(name, argv, env, work / "logs", args.warmup_steps, args.steps, quiet,
                                  args.clean_cores, log)
            result.update(config=CONFIG, variant=variant, resolution=RESOLUTION, round=rnd,
                          extra_args=E2E_VARIANTS[variant])
            summary = out / "train_summary.json"
            if summary.exists():
                own = json.loads(summary.read_text())
                result["guard_counters"] = {k: own.get(k) for k in ("skipped_steps", "loss_spikes", "rollbacks",
                                                                      "applied_updates")}
            runs.append(result)
            shutil.rmtree(out, ignore_errors=True)
    return runs, summarize_e2e(runs, args.min_clean_steps)


def summarize_e2e(runs: list[dict], min_clean: int) -> list[dict]:
    rows: dict[str, dict] = {}
    pools: dict[str, list[float]] = {}
    for variant in E2E_VARIANTS:
        ok = [r for r in runs if r["variant"] == variant and "step_s" in r]
        if not ok:
            rows[variant] = {"variant": variant, "ok_runs": 0}
            continue
        all_steps = [t for r in ok for t in r["step_s"]]
        clean = [t for r in ok for t, c in zip(r["step_s"], r["step_clean"]) if c]
        noisy = len(clean) < min_clean
        pool = all_steps if noisy else clean
        pools[variant] = pool
        rows[variant] = {
            "variant": variant, "extra_args": " ".join(E2E_VARIANTS[variant]), "ok_runs": len(ok),
            "median_s_per_step": round(statistics.median(pool), 5),
            "mean_s_per_step": round(statistics.mean(r["mean_s_per_step"] for r in ok), 5),
            "clean_steps": len(clean), "timed_steps": len(all_steps), "noisy": noisy,
            "median_s_per_step_all_steps": round(statistics.median(all_steps), 5),
            "per_round_median_s_per_step": {r["round"]: round(statistics.median(
                [t for t, c in zip(r["step_s"], r["step_clean"]) if c] or r["step_s"]), 5) for r in ok},
            "per_round_mean_s_per_step": {r["round"]: r["mean_s_per_step"] for r in ok},
            "skipped_steps": [r.get("guard_counters", {}).get("skipped_steps") for r in ok],
        }
    base = rows.get(E2E_BASE)
    if base and base.get("ok_runs"):
        for variant, row in rows.items():
            if variant == E2E_BASE or not row.get("ok_runs"):
                continue
            ratio = row["median_s_per_step"] / base["median_s_per_step"]
            lo, hi = _bootstrap_ratio(pools[variant], pools[E2E_BASE])
            paired = [row["per_round_median_s_per_step"][k] / base["per_round_median_s_per_step"][k] - 1
                      for k in row["per_round_median_s_per_step"] if k in base["per_round_median_s_per_step"]]
            paired_mean = [row["per_round_mean_s_per_step"][k] / base["per_round_mean_s_per_step"][k] - 1
                           for k in row["per_round_mean_s_per_step"] if k in base["per_round_mean_s_per_step"]]
            row.update({
                "overhead_pct_median": round(100 * (ratio - 1), 2),
                "overhead_pct_bootstrap95": [round(100 * (lo - 1), 2), round(100 * (hi - 1), 2)],
                "overhead_pct_per_round_median": [round(100 * p, 2) for p in paired],
                "overhead_pct_mean": round(100 * (row["mean_s_per_step"] / base["mean_s_per_step"] - 1), 2),
                "overhead_pct_per_round_mean": [round(100 * p, 2) for p in paired_mean],
            })
        # Round-to-round spread of the baseline itself: how far the same configuration moves between rounds.
        meds = list(base["per_round_median_s_per_step"].values())
        base["round_spread_pct"] = round(100 * (max(meds) - min(meds)) / statistics.median(meds), 2)
    return list(rows.values())


# --------------------------------------------------------------------------------------------
# part 2: isolated optimizer-update cost
# --------------------------------------------------------------------------------------------
def run_isolated(args, work: Path, step_s: float | None) -> dict:
    import torch
    import torch.utils.benchmark as tb

    from dit_lora.config import parse_config
    from dit_lora.families.sana.demo import build_tiny_sana_pipeline
    from dit_lora.registry import get_family
    from dit_lora.modeling import trainables
    from dit_lora.training.guard import _APPLIED, StepGuard
    from dit_lora.training.optim import make_lr_scheduler, make_optimizer

    path = build_tiny_sana_pipeline(work / "models" / CONFIG, size=CONFIG, seed=0)
    # [1:]: without the script
    argv = sana_cpu.dit_lora_cmd(work, CONFIG, RESOLUTION, args.steps, work / "runs" / "isolated")[1:]
    argv[argv.index("--pretrained_model_name_or_path") + 1] = str(path)
    cfg = parse_config(argv)
    device = torch.device("cpu")
    family = get_family(cfg.model.family)
    comps = family.load_components(cfg, device)  # as train(); encoders are not used here
    model = comps.model
    comps.encoders.clear()
    trainables.add_lora(model, rank=cfg.lora.rank, alpha=cfg.effective_lora_alpha, dropout=cfg.lora.lora_dropout,
                      targets=cfg.lora.lora_layers or family.default_lora_layers, seed=cfg.training.seed)
    backbone = trainables.unfreeze_backbone(model, cfg.lora.train_backbone)
    trainables.cast_trainable_to_fp32(model, under_autocast=cfg.training.mixed_precision != "no")
    trainable = [p for p in model.parameters() if p.requires_grad]
    gen = torch.Generator().manual_seed(0)
    for p in trainable:
        p.grad = (torch.randn(p.shape, generator=gen) * 1e-3).to(p.dtype)
    params = [p for p in model.parameters() if p.grad is not None]
    n_params = sum(p.numel() for p in trainable)
    loss = torch.tensor(0.25)  # the loop's micro_losses: a float32 0-dim tensor
    max_steps = args.isolated_max_steps

    def new_optimizer():
        groups = trainables.build_param_groups(
            model, learning_rate=cfg.training.learning_rate, backbone_names=backbone,
            backbone_learning_rate=cfg.lora.backbone_learning_rate, weight_decay=cfg.training.adam_weight_decay,
            loraplus_lr_ratio=cfg.lora.loraplus_lr_ratio)
        opt, fused = make_optimizer(cfg.training, groups, device)
        return opt, fused, make_lr_scheduler(cfg.training, opt, max_steps)

    def clip():
        return torch.nn.utils.clip_grad_norm_(params, cfg.training.max_grad_norm)  # accelerator.clip_grad_norm_ on 1 CPU process

    fns, guards = {}, {}
    opt_a, fused, sched_a = new_optimizer()

    def baseline():
        clip()
        opt_a.step()
        sched_a.step()

    fns["baseline"] = baseline
    for name, enabled, sigma in (("guard off", False, None), ("guard on", True, None), ("guard on + spikes", True, 6.0)):
        opt, fused_g, sched = new_optimizer()
        guard = StepGuard(opt, sched.lr_lambdas, max_steps, device, enabled=enabled, fused=fused_g,
                          interval=CHECK_INTERVAL, max_consecutive_skips=cfg.guards.max_consecutive_skips,
                          rollback_lr_factor=cfg.guards.rollback_lr_factor, max_rollbacks=cfg.guards.max_rollbacks,
                          spike_sigma=sigma, world_size=1)
        guards[name] = guard

        def step(guard=guard, opt=opt):
            norm = clip()
            guard.step(opt, opt, loss, norm, 0)

        fns[name] = step
    check_guard = guards["guard on"]

    def check():
        check_guard.read()
        check_guard.take_snapshot(model)

    # Warm up: first steps allocate the Adam state.
    for fn in fns.values():
        for _ in range(3):
            fn()
    check()

    def measure(threads: int) -> dict:
        rounds: list[dict] = []
        order = list(fns) + ["check"]
        all_fns = {**fns, "check": check}
        for rnd in range(args.isolated_rounds):
            quiet = sana_cpu.wait_for_quiet(args.quiet_cores, args.max_wait_s, log)
            rot = order[rnd % len(order):] + order[: rnd % len(order)]
            entry = {"round": rnd, **quiet, "variants": {}}
            for name in rot:
                b0, s0, t0 = sana_cpu._busy_ticks(), sana_cpu._proc_ticks("self"), time.perf_counter()
                m = tb.Timer(stmt="fn()", globals={"fn": all_fns[name]}, num_threads=threads,
                             label="guard", description=name).blocked_autorange(min_run_time=args.min_run_time)
                b1, s1, t1 = sana_cpu._busy_ticks(), sana_cpu._proc_ticks("self"), time.perf_counter()
                foreign = max(0.0, ((b1 - b0) - (s1 - s0)) / sana_cpu.CLK_TCK / (t1 - t0))
                entry["variants"][name] = {"median_us": round(m.median * 1e6, 2), "iqr_us": round(m.iqr * 1e6, 2),
                                           "best_block_us": round(min(m.times) * 1e6, 2),
                                           "runs": len(m.times), "number_per_run": m.number_per_run,
                                           "foreign_cores": round(foreign, 3)}
            entry["clean"] = all(v["foreign_cores"] < args.clean_cores for v in entry["variants"].values())
            # No timed step may have been skipped (a skipped fused step returns early).
            for name, guard in guards.items():
                counts = guard.counts.tolist()
                assert counts[0] == 0, f"{name}: {counts[0]} timed steps were skipped; the timing would be biased"
                assert counts[_APPLIED] < max_steps, "raise --isolated_max_steps: the LR table ran out"
            rounds.append(entry)
            log(f"  isolated round {rnd + 1}/{args.isolated_rounds} ({'clean' if entry['clean'] else 'NOISY'}): "
                + ", ".join(f"{k} {v['median_us']:.0f} µs (other procs {v['foreign_cores']:.2f} cores)"
                            for k, v in entry["variants"].items()))
        clean_rounds = [r for r in rounds if r["clean"]]
        noisy = len(clean_rounds) < args.min_clean_rounds
        use = rounds if noisy else clean_rounds
        rows = []
        for name in order:
            per_round = [r["variants"][name]["median_us"] for r in use]
            best = min(r["variants"][name]["best_block_us"] for r in rounds)
            row = {"variant": name, "median_us": round(statistics.median(per_round), 2),
                   "per_round_us": per_round, "min_us": min(per_round), "max_us": max(per_round),
                   # Least-disturbed estimate: the fastest block of any round (load only ever adds time).
                   "best_us": best}
            if name in ISO_VARIANTS and name != "baseline":
                best_base = min(r["variants"]["baseline"]["best_block_us"] for r in rounds)
                row["best_vs_baseline_us"] = round(best - best_base, 2)
            if name in ISO_VARIANTS and name != "baseline":
                diffs = [r["variants"][name]["median_us"] - r["variants"]["baseline"]["median_us"] for r in use]
                row.update(vs_baseline_us=round(statistics.median(diffs), 2),
                           vs_baseline_us_range=[round(min(diffs), 2), round(max(diffs), 2)])
                if name != "guard off":
                    d_off = [r["variants"][name]["median_us"] - r["variants"]["guard off"]["median_us"] for r in use]
                    row.update(vs_guard_off_us=round(statistics.median(d_off), 2),
                               vs_guard_off_us_range=[round(min(d_off), 2), round(max(d_off), 2)])
            if name == "check":
                row["per_step_us_amortized"] = round(row["median_us"] / CHECK_INTERVAL, 2)
            if step_s:
                key = "per_step_us_amortized" if name == "check" else "vs_baseline_us"
                if key in row:
                    row["pct_of_step"] = round(100 * row[key] * 1e-6 / step_s, 3)
                if "best_vs_baseline_us" in row:
                    row["best_pct_of_step"] = round(100 * row["best_vs_baseline_us"] * 1e-6 / step_s, 3)
                row["pct_of_step_total"] = round(100 * (row.get("per_step_us_amortized") or row["median_us"]) * 1e-6 / step_s, 3)
            rows.append(row)
        return {"threads": threads, "trainable_params": n_params, "param_tensors": len(trainable), "fused_adamw": fused,
                "param_groups": len(opt_a.param_groups), "max_steps": max_steps, "check_interval": CHECK_INTERVAL,
                "min_run_time_s": args.min_run_time, "reference_step_s": step_s, "clean_rounds": len(clean_rounds),
                "rounds_total": len(rounds), "noisy": noisy, "summary": rows, "rounds": rounds}

    if args.threads:
        torch.set_num_threads(args.threads)
    train_threads = torch.get_num_threads()
    counts = [train_threads] + [t for t in args.isolated_extra_threads if t != train_threads]
    results = None
    for threads in counts:
        log(f"  {threads} intra-op thread(s){' (as training)' if threads == train_threads else ''}:")
        measured = measure(threads)
        if results is None:
            results = measured
            results["other_thread_counts"] = []
        else:
            results["other_thread_counts"].append(measured)
    return results


# --------------------------------------------------------------------------------------------
# report
# --------------------------------------------------------------------------------------------
def markdown(results: dict) -> str:
    env = results["environment"]
    lines = [f"Device: {env['cpu_model']} ({env['cpu_cores']} cores; {', '.join(env['cpu_flags'])}), "
             f"torch {env['versions'].get('torch')} (CPU), {env['torch_threads']} intra-op threads.", ""]
    e2e = results.get("e2e_summary")
    if e2e:
        lines += ["End to end (small Sana, 256 px, batch 4; steps pooled over rounds, clean steps only):", "",
                  "| variant | s/step (median) | s/step (mean, incl. checks) | clean / timed steps | per-round medians (s) "
                  "| overhead vs no-guard, median [bootstrap 95%] | per-round overhead (median) | overhead, mean |",
                  "|---|---:|---:|---:|---|---|---|---:|"]
        for r in e2e:
            if not r.get("ok_runs"):
                lines.append(f"| {r['variant']} | failed | | | | | | |")
                continue
            rounds = " / ".join(f"{v:.4f}" for v in r["per_round_median_s_per_step"].values())
            if "overhead_pct_median" in r:
                lo, hi = r["overhead_pct_bootstrap95"]
                ov = f"{r['overhead_pct_median']:+.2f}% [{lo:+.2f}, {hi:+.2f}]"
                pr = " / ".join(f"{p:+.2f}%" for p in r["overhead_pct_per_round_median"])
                om = f"{r['overhead_pct_mean']:+.2f}%"
            else:
                ov, pr, om = "(reference)", f"round spread {r.get('round_spread_pct', 0):.1f}%", ""
            flag = " (noisy)" if r["noisy"] else ""
            lines.append(f"| {r['variant']} | {r['median_s_per_step']:.4f}{flag} | {r['mean_s_per_step']:.4f} | "
                         f"{r['clean_steps']}/{r['timed_steps']} | {rounds} | {ov} | {pr} | {om} |")
        lines.append("")
    iso = results.get("isolated")
    for iso in ([iso] + iso.get("other_thread_counts", [])) if iso else []:
        ref = iso.get("reference_step_s")
        lines += ["", f"Isolated optimizer update, {iso['threads']} intra-op thread(s) ({iso['trainable_params']:,} trainable fp32 LoRA parameters in "
                  f"{iso['param_tensors']} tensors, fused AdamW: {iso['fused_adamw']}; median over "
                  f"{iso['clean_rounds'] if not iso['noisy'] else iso['rounds_total']} "
                  f"{'clean ' if not iso['noisy'] else '(noisy) '}rounds of "
                  f"`blocked_autorange(min_run_time={iso['min_run_time_s']})`; % of the no-guard step "
                  f"{ref:.4f} s):" if ref else "Isolated optimizer update:", "",
                  "| variant | µs per update (median of rounds) | per-round range (µs) | vs baseline (µs) [round range] | "
                  "vs guard off (µs) | % of a training step | fastest block (µs) | fastest vs baseline (µs, % of step) |",
                  "|---|---:|---|---|---|---:|---:|---|"]
        for r in iso["summary"]:
            name = r["variant"]
            if name == "check":
                name = f"check every {iso['check_interval']} steps: `read()` + snapshot (amortized {r['per_step_us_amortized']:.0f} µs/step)"
            vb = (f"{r['vs_baseline_us']:+.0f} [{r['vs_baseline_us_range'][0]:+.0f}, {r['vs_baseline_us_range'][1]:+.0f}]"
                  if "vs_baseline_us" in r else "")
            vg = (f"{r['vs_guard_off_us']:+.0f} [{r['vs_guard_off_us_range'][0]:+.0f}, {r['vs_guard_off_us_range'][1]:+.0f}]"
                  if "vs_guard_off_us" in r else "")
            pct = f"{r['pct_of_step']:+.3f}%" if "pct_of_step" in r else (
                f"{r['pct_of_step_total']:.3f}% (whole update)" if "pct_of_step_total" in r else "")
            fb = (f"{r['best_vs_baseline_us']:+.0f} ({r['best_pct_of_step']:+.3f}%)" if "best_pct_of_step" in r
                  else (f"{r['best_vs_baseline_us']:+.0f}" if "best_vs_baseline_us" in r else ""))
            lines.append(f"| {name} | {r['median_us']:.0f} | {r['min_us']:.0f}-{r['max_us']:.0f} | {vb} | {vg} | {pct} | "
                         f"{r['best_us']:.0f} | {fb} |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", default=str(BENCH / "overhead_cpu.json"))
    ap.add_argument("--markdown", default=None, help="Also write the summary tables to this file.")
    ap.add_argument("--work_dir", default=os.path.join(tempfile.gettempdir(), "dit-lora-bench-cpu"),
                    help="Shared with sana/vs_example_cpu.py (models, data, cache, logs).")
    ap.add_argument("--parts", default="e2e,isolated", help="Comma-separated subset of e2e,isolated.")
    ap.add_argument("--repeats", type=int, default=3, help="End-to-end interleaved rounds.")
    ap.add_argument("--steps", type=int, default=40, help="Training steps per end-to-end run.")
    ap.add_argument("--warmup_steps", type=int, default=4, help="Steps not timed at the start of each run.")
    ap.add_argument("--threads", type=int, default=None,
                    help="Intra-op threads for the training runs and the isolated part (OMP_NUM_THREADS for the "
                         "children, torch.set_num_threads here); default: torch's default (one per core). On a "
                         "shared 2-core box, 1 thread is far less disturbed by other processes than 2.")
    ap.add_argument("--isolated_rounds", type=int, default=7)
    ap.add_argument("--min_run_time", type=float, default=1.0, help="blocked_autorange min_run_time per measurement (s).")
    ap.add_argument("--isolated_extra_threads", type=lambda v: [int(x) for x in v.split(",") if x], default=[],
                    help="Also time the isolated part with these intra-op thread counts (e.g. 1: a single thread "
                         "is far less disturbed by other processes than two OpenMP threads on 2 shared cores).")
    ap.add_argument("--isolated_max_steps", type=int, default=1_000_000,
                    help="Length of the guard's LR table in the isolated part (must exceed the timed updates).")
    ap.add_argument("--reference_step_s", type=float, default=None,
                    help="Step time for the %% column when the e2e part is not run.")
    ap.add_argument("--quiet_cores", type=float, default=0.3)
    ap.add_argument("--max_wait_s", type=float, default=20.0)
    ap.add_argument("--clean_cores", type=float, default=0.15)
    ap.add_argument("--min_clean_steps", type=int, default=5)
    ap.add_argument("--min_clean_rounds", type=int, default=3)
    args = ap.parse_args(argv)
    parts = set(args.parts.split(","))

    work = Path(args.work_dir).resolve()
    work.mkdir(parents=True, exist_ok=True)
    env = child_environment()  # PYTHONPATH kept, this checkout first: the children run this checkout's code
    if args.threads:
        env["OMP_NUM_THREADS"] = os.environ["OMP_NUM_THREADS"] = str(args.threads)
    os.environ.update(HF_HUB_OFFLINE="1", TOKENIZERS_PARALLELISM="false")
    environment = {**sana_cpu.machine_environment(env), "cuda": False}
    versions = environment["versions"]
    log(f"device: {environment['cpu_model']}, {environment['cpu_cores']} cores, torch {versions['torch']}, "
        f"{environment['torch_threads']} threads; work dir {work}")
    t_start = time.perf_counter()
    results: dict = {"benchmark": "guard/overhead_cpu", "created": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
                     "command": " ".join([str(Path(__file__).resolve().relative_to(REPO))]
                                         + (argv if argv is not None else sys.argv[1:])),
                     "environment": environment,
                     "settings": {**sana_cpu.COMMON, "threads": environment["torch_threads"], "config": CONFIG, "resolution": RESOLUTION,
                                  "steps": args.steps,
                                  "warmup_steps": args.warmup_steps, "repeats": args.repeats,
                                  "e2e_variants": E2E_VARIANTS, "isolated_rounds": args.isolated_rounds,
                                  "min_run_time_s": args.min_run_time, "quiet_cores": args.quiet_cores,
                                  "max_wait_s": args.max_wait_s, "clean_cores": args.clean_cores,
                                  "min_clean_steps": args.min_clean_steps, "min_clean_rounds": args.min_clean_rounds}}
    step_s = args.reference_step_s
    if "e2e" in parts:
        t0 = time.perf_counter()
        runs, rows = run_e2e(args, work, env)
        results.update(e2e_summary=rows, e2e_runs=runs, e2e_time_s=round(time.perf_counter() - t0, 1))
        base = next((r for r in rows if r["variant"] == E2E_BASE and r.get("ok_runs")), None)
        if base:
            step_s = base["median_s_per_step"]
    if "isolated" in parts:
        t0 = time.perf_counter()
        log("isolated optimizer-update timing ...")
        results["isolated"] = run_isolated(args, work, step_s)
        results["isolated_time_s"] = round(time.perf_counter() - t0, 1)
    results["total_time_s"] = round(time.perf_counter() - t_start, 1)
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(results, indent=2) + "\n")
    table = markdown(results)
    if args.markdown:
        Path(args.markdown).write_text(table + "\n")
    log("\n" + table)
    log(f"\nresults: {args.out} (total {results['total_time_s']:.0f} s)")
    ok = all(r.get("ok_runs") for r in results.get("e2e_summary", []))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
