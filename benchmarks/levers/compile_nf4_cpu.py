#!/usr/bin/env python
"""CPU: the two levers of issue 16 on the families sana/vs_example_cpu.py does not cover, with its harness.

    HF_HUB_OFFLINE=1 python benchmarks/levers/compile_nf4_cpu.py --parts compile,nf4 \
        --out benchmarks/levers/compile_nf4_cpu.json

Two parts, each run a fresh child process under ``benchmarks/common/step_timer.py`` via
``benchmarks/common/cpu_harness.run_once`` (the same probe, quiet-core waiting and clean-step accounting as
``sana/vs_example_cpu.py``):

* ``compile``: the tiny CogVideoX demo (``recipes/configs/cogvideox/demo.yaml``: 5B architecture cut to
  width 32 / 2 layers, 9 x 64 x 64, batch 4) with ``--compile off`` and ``--compile blocks``; each compiled
  run gets a fresh ``TORCHINDUCTOR_CACHE_DIR`` (a cold compile, what a user's first run pays).
* ``nf4``: real widths, reduced depth, random weights, built offline from the catalogue's configs by
  ``tests/support/real_layout.py`` (the same folders ``plan/vs_cpu_runs.py`` uses): Sana 1600M (2240 wide,
  20 heads x 112, caption 2304; Gemma-2 2B widths with 1 layer; the DC-AE's published stages with narrow
  channels) and CogVideoX-5b (3072 wide, 48 heads; T5-XXL widths with 1 layer; the VAE's stages with narrow
  channels), each with ``--layers`` transformer blocks, trained with ``--quantize_base none`` and ``nf4``
  at a small size (Sana 256 px batch 1, CogVideoX 9 x 128 x 128 batch 1), fp32 compute
  (``--mixed_precision no``: bf16 matmuls are slow on CPUs without AVX-512 BF16).

Reported per run: median s/step over the timed (after ``--warmup_steps``) steps, clean vs timed steps, peak
RSS (``ru_maxrss`` of the child, whole life) and the largest RSS sampled at a step (training phase), the
warm-up steps' times, and the run's own ``train_summary.json`` compile counters and ``config.quantize_base``.
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
if __package__ in (None, ""):
    sys.path.insert(0, str(REPO))
from benchmarks.common.cpu_harness import child_environment, machine_environment, run_once, wait_for_quiet  # noqa: E402

COMMON = ["--skip_doctor", "--report_to", "none", "--checkpointing_steps", "0", "--validation_prompt", "none",
          "--overwrite_output_dir", "--seed", "0", "--gradient_accumulation_steps", "1"]

#: model key -> (real_layout builder, hub id, description)
MODELS = {
    "sana1600m": ("sana_pipeline", "Efficient-Large-Model/Sana_1600M_1024px_BF16_diffusers",
                  "Sana 1600M widths (2240 wide, 20 heads x 112, caption 2304); Gemma-2 2B widths, 1 layer; "
                  "DC-AE published stages, narrow channels"),
    "cogvideox5b": ("cogvideox_pipeline", "THUDM/CogVideoX-5b",
                    "CogVideoX-5b widths (3072 wide, 48 heads x 64, text 4096); T5-XXL widths, 1 layer; "
                    "VAE published stages, narrow channels"),
}


def build(work: Path, layers: int, env: dict) -> None:
    """Model folders and data (a child process, so this one stays small)."""
    code = f"""
import sys
sys.path.insert(0, {str(REPO)!r}); sys.path.insert(0, {str(REPO / 'tests' / 'support')!r})
from pathlib import Path
import real_layout
from dit_lora.data.synthetic.shapes import make_shapes_dataset
from dit_lora.data.synthetic.clips import make_moving_square_dataset
work = Path({str(work)!r})
for key, (builder, hub, _) in {dict((k, v) for k, v in MODELS.items())!r}.items():
    if not (work / 'models' / key / hub.split('/')[-1] / 'model_index.json').exists():
        getattr(real_layout, builder)(work / 'models' / key, hub, layers={layers})
if not (work / 'data' / 'shapes').exists():
    make_shapes_dataset(work / 'data' / 'shapes', n=8, size=256, seed=0)
if not (work / 'data' / 'clips').exists():
    make_moving_square_dataset(work / 'data' / 'clips', n=4, num_frames=9, size=128, seed=0)
# the tiny CogVideoX demo (demo: true) builds its own model and clips on first use
"""
    done = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True)
    if done.returncode != 0:
        raise SystemExit(f"building the models/data failed:\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}")


def settings(work: Path, steps: int) -> dict[str, tuple[str, list[str], dict]]:
    """name -> (recipe, argv after the recipe, extra env)."""
    out = {}
    tiny = ["--config", str(REPO / "recipes" / "configs" / "cogvideox" / "demo.yaml"),
            "--pretrained_model_name_or_path", str(work / "models" / "tiny-cogvideox"),
            "--train_data_dir", str(work / "data" / "tiny-clips"), "--cache_dir", str(work / "cache"),
            "--max_train_steps", str(steps)]
    for mode in ("off", "blocks"):
        out[f"compile:cogvideox-tiny:{mode}"] = ("cogvideox", tiny + ["--compile", mode], {})
    sana = ["--pretrained_model_name_or_path", str(work / "models" / "sana1600m" / MODELS["sana1600m"][1].split("/")[-1]),
            "--train_data_dir", str(work / "data" / "shapes"), "--cache_dir", str(work / "cache"),
            "--resolution", "256", "--train_batch_size", "1", "--mixed_precision", "no", "--rank", "16",
            "--max_train_steps", str(steps)]
    cog = ["--pretrained_model_name_or_path", str(work / "models" / "cogvideox5b" / MODELS["cogvideox5b"][1].split("/")[-1]),
           "--train_data_dir", str(work / "data" / "clips"), "--cache_dir", str(work / "cache"),
           "--max_num_frames", "9", "--height", "128", "--width", "128", "--allow_untrained_resolution", "true",
           "--train_batch_size", "1", "--mixed_precision", "no", "--rank", "16", "--max_train_steps", str(steps)]
    for q in ("none", "nf4"):
        out[f"nf4:sana1600m:{q}"] = ("sana", sana + ["--quantize_base", q], {})
        out[f"nf4:cogvideox5b:{q}"] = ("cogvideox", cog + ["--quantize_base", q], {})
    return out


def row(r: dict, min_clean: int) -> dict:
    if "step_s" not in r:
        return {"name": r["name"], "failed": r.get("error", "")[-400:]}
    clean = [t for t, c in zip(r["step_s"], r["step_clean"]) if c]
    noisy = len(clean) < min_clean
    pool = r["step_s"] if noisy else clean
    own = r.get("dit_lora_summary") or {}
    comp = own.get("compile") or {}
    return {"name": r["name"], "median_s_per_step": round(statistics.median(pool), 4), "noisy": noisy,
            "clean_steps": len(clean), "timed_steps": len(r["step_s"]),
            "peak_rss_mib": round(r["peak_rss_bytes"] / 2**20), "train_rss_mib": round(r["train_rss_max_bytes"] / 2**20),
            "warmup_step_s": r.get("warmup_step_s"), "foreign_cores": r.get("foreign_cores"),
            "compile": {k: comp.get(k) for k in ("mode", "regions", "graphs", "graph_breaks", "recompiles_after_warmup",
                                                 "steps_that_compiled")} if comp else None,
            "quantize_base": (own.get("config") or {}).get("quantize_base")}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--parts", default="compile,nf4")
    ap.add_argument("--only", default="", help="Comma-separated setting names (see --list).")
    ap.add_argument("--list", action="store_true")
    ap.add_argument("--layers", type=int, default=2, help="Transformer blocks of the real-width models.")
    ap.add_argument("--steps", type=int, default=10)
    ap.add_argument("--warmup_steps", type=int, default=3)
    ap.add_argument("--work_dir", default="/tmp/dit-lora-bench-levers")
    ap.add_argument("--out", default=str(REPO / "benchmarks" / "levers" / "compile_nf4_cpu.json"))
    ap.add_argument("--quiet_cores", type=float, default=0.3)
    ap.add_argument("--max_wait_s", type=float, default=20.0)
    ap.add_argument("--clean_cores", type=float, default=0.15)
    ap.add_argument("--min_clean_steps", type=int, default=3)
    args = ap.parse_args(argv)
    work = Path(args.work_dir).resolve()
    table = settings(work, args.steps)
    parts = set(args.parts.split(","))
    names = [n for n in table if n.split(":")[0] in parts and (not args.only or n in args.only.split(","))]
    if args.list:
        print("\n".join(table))
        return 0
    env = child_environment()  # PYTHONPATH kept, this checkout first: the children run this checkout's code
    work.mkdir(parents=True, exist_ok=True)
    t0 = time.perf_counter()
    build(work, args.layers, env)
    environment = machine_environment(env)
    runs = []
    for name in names:
        recipe, argv_, extra = table[name]
        slug = name.replace(":", "-")
        out = work / "runs" / slug
        shutil.rmtree(out, ignore_errors=True)
        child_env = dict(env, **extra)
        if "--compile" in argv_ and argv_[argv_.index("--compile") + 1] != "off":
            cache = work / "inductor" / slug
            shutil.rmtree(cache, ignore_errors=True)
            child_env["TORCHINDUCTOR_CACHE_DIR"] = str(cache)
        script = [str(REPO / "recipes" / f"{recipe}_lora.py")] + argv_ + COMMON + ["--output_dir", str(out)]
        print(f"{name} ...", flush=True)
        quiet = wait_for_quiet(args.quiet_cores, args.max_wait_s, print)
        r = run_once(slug, script, child_env, work / "logs", args.warmup_steps, args.steps, quiet, args.clean_cores,
                     print)
        r["setting"] = name
        runs.append(r)
        shutil.rmtree(out, ignore_errors=True)
        Path(args.out).write_text(json.dumps({
            "benchmark": "levers/compile_nf4_cpu", "created": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
            "total_time_s": round(time.perf_counter() - t0, 1), "environment": environment,
            "settings": {"layers": args.layers, "steps": args.steps, "warmup_steps": args.warmup_steps,
                         "models": {k: v[2] for k, v in MODELS.items()}, "clean_cores": args.clean_cores,
                         "commands": {n: table[n][1] for n in names}},
            "summary": [row(x, args.min_clean_steps) for x in runs], "runs": runs}, indent=2) + "\n")
    for s in [row(x, args.min_clean_steps) for x in runs]:
        print(json.dumps(s))
    return 0


if __name__ == "__main__":
    sys.exit(main())
