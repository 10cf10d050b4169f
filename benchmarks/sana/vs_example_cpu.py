#!/usr/bin/env python
"""CPU benchmark: dit-lora's Sana recipe vs diffusers' ``train_dreambooth_lora_sana.py`` on the same work.

    python benchmarks/sana/vs_example_cpu.py --diffusers_example /tmp/anchors/train_dreambooth_lora_sana.py \
        --out benchmarks/sana/vs_example_cpu.json

Two configurations, both batch 4, LoRA rank 8 / alpha 16 on to_q, to_k, to_v, to_out.0, bf16,
AdamW lr 1e-3 (constant with 10 warm-up steps), max_grad_norm 1, logit-normal timesteps,
300-token captions, latents cached, no validation, no checkpoints:

* ``tiny``:  ``recipes/configs/sana/demo.yaml`` as is (tiny random Sana, 64 px, 32 shapes images);
* ``small``: the same with ``--demo_size small`` (the compute-bound random Sana) at
  ``--small_resolution`` px (default 256: DC-AE stride 8 -> 32x32 latent tokens).

Each is trained by two programs, each run a fresh child process started from the same model
folder and the same images and captions (built offline once into ``--work_dir``):

* ``dit-lora``: ``recipes/sana_lora.py --config recipes/configs/sana/demo.yaml`` + overrides;
  it caches latents *and* caption embeddings to disk before training.
* ``diffusers``: the diffusers example on the same images with their captions
  (``--dataset_name <imagefolder> --caption_column text --cache_latents``). It caches only
  latents, so it runs the Gemma text encoder on the batch's captions in every step. To separate
  that from the rest of its step, the time spent in ``SanaPipeline.encode_prompt`` is recorded
  per step and a derived ``diffusers (minus text encoding)`` row is reported: the same per-step
  work as dit-lora's cached steps (transformer forward/backward, clipping, AdamW).

  (Its other mode, ``--instance_data_dir`` with one ``--instance_prompt``, encodes the prompt only
  once, but with ``--train_batch_size`` > 1 it crashes in the first step in this diffusers version:
  the single prompt's embeddings/mask are not repeated to the batch size, and the cross-attention
  mask reshape fails. Hence the derived row instead.)

The diffusers example is not part of this repository: pass its path with
``--diffusers_example`` (get it from github.com/huggingface/diffusers,
``examples/dreambooth/train_dreambooth_lora_sana.py``); without it only dit-lora is measured.
The example imports torchvision; it runs under ``--example_python`` (default: this interpreter), an
environment with torch and torchvision. Where that interpreter cannot import torchvision (this
project's CPU machine: torchvision's wheels are CUDA builds), the comparison is skipped and says so.

Timing: every child runs under ``benchmarks/common/step_timer.py``, which timestamps each update of the
trainer's step progress (the example's tqdm bar, dit-lora's ``Progress``; both update it once per optimizer
step), so model loading, latent/text caching and saving are excluded for all programs alike; the first ``--warmup_steps``
steps of each run are not timed. Peak RSS = ``ru_maxrss`` of the child (``os.wait4``; whole
process life, loading and caching included), plus the largest RSS seen at a step (the
training-phase footprint).

The machine may be shared, and two OpenMP threads competing with other processes for 2 cores
slow down by anything from 2x to 50x, so: before each run the benchmark waits (up to
``--max_wait_s``) until other processes use fewer than ``--quiet_cores`` cores; during each run
it samples every 0.1 s how much CPU other processes use (``/proc/stat`` minus the child's
``/proc/<pid>/stat``), and calls a step *clean* when that stayed below ``--clean_cores`` around
it. The summary pools the timed steps of all ``--repeats`` interleaved rounds and reports the
median (and mean) over clean steps, or over all steps, marked noisy, when fewer than
``--min_clean_steps`` were clean. Every step's time and foreign load is kept in the JSON.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from benchmarks.common.cpu_harness import child_environment, machine_environment, run_once, wait_for_quiet  # noqa: E402

REPO = Path(__file__).resolve().parents[2]
BENCH = Path(__file__).resolve().parent
DEMO_CONFIG = REPO / "recipes" / "configs" / "sana" / "demo.yaml"
RECIPE = REPO / "recipes" / "sana_lora.py"

# What recipes/configs/sana/demo.yaml sets, spelled out for the diffusers example.
COMMON = {
    "batch": 4,
    "rank": 8,
    "lora_alpha": 16,
    "lora_layers": "to_q,to_k,to_v,to_out.0",
    "learning_rate": 1e-3,
    "lr_scheduler": "constant_with_warmup",
    "lr_warmup_steps": 10,
    "max_grad_norm": 1.0,
    "weighting_scheme": "logit_normal",
    "max_sequence_length": 300,
    "seed": 0,
    "num_images": 32,
}
UNUSED_PROMPT = "a red circle on a blue background"  # the example's parser requires --instance_prompt
VARIANTS = ("dit-lora", "diffusers")
DERIVED = "diffusers (minus text encoding)"
ENCODE_CALL = "diffusers:SanaPipeline.encode_prompt"


# --------------------------------------------------------------------------------------------
# assets
# --------------------------------------------------------------------------------------------
def build_assets(work: Path, sizes: dict[str, int], env: dict) -> None:
    """Random Sana pipelines and shapes data sets (a child process, so this one stays small)."""
    code = (
        "import sys; sys.path.insert(0, sys.argv[1])\n"
        "from dit_lora.families.sana.demo import build_tiny_sana_pipeline\n"
        "from dit_lora.data.synthetic.shapes import make_shapes_dataset\n"
        "work = sys.argv[2]\n"
        "for spec in sys.argv[3:]:\n"
        "    size, res = spec.split(':')\n"
        "    build_tiny_sana_pipeline(f'{work}/models/{size}', size=size, seed=0)\n"
        f"    make_shapes_dataset(f'{{work}}/data/shapes{{res}}', n={COMMON['num_images']}, size=int(res), seed=0)\n"
    )
    specs = [f"{size}:{res}" for size, res in sizes.items()]
    done = subprocess.run([sys.executable, "-c", code, str(REPO), str(work)] + specs, env=env,
                          capture_output=True, text=True)
    if done.returncode != 0:
        raise SystemExit(f"building the demo models/data failed:\n{done.stdout}\n{done.stderr}")
    for res in set(sizes.values()):
        src = work / "data" / f"shapes{res}"
        pngs = sorted(src.glob("*.png"))
        # The same images and metadata.jsonl as an imagefolder without dit-lora's marker file.
        dst = work / "data" / f"shapes{res}_imagefolder"
        if dst.exists() and len(list(dst.glob("*.png"))) == len(pngs):
            continue
        shutil.rmtree(dst, ignore_errors=True)
        dst.mkdir(parents=True)
        for p in pngs:
            os.symlink(p, dst / p.name)
        shutil.copy(src / "metadata.jsonl", dst / "metadata.jsonl")


# --------------------------------------------------------------------------------------------
# commands
# --------------------------------------------------------------------------------------------
def dit_lora_cmd(work: Path, size: str, res: int, steps: int, out: Path, batch: int = COMMON["batch"],
                 compile_mode: str = "off", precision: str = "bf16") -> list[str]:
    return [
        str(RECIPE), "--config", str(DEMO_CONFIG), "--skip_doctor",
        "--demo_size", size, "--pretrained_model_name_or_path", str(work / "models" / size),
        "--train_data_dir", str(work / "data" / f"shapes{res}"), "--demo_num_images", str(COMMON["num_images"]),
        "--resolution", str(res), "--train_batch_size", str(batch),
        "--rank", str(COMMON["rank"]), "--lora_alpha", str(COMMON["lora_alpha"]),
        "--learning_rate", str(COMMON["learning_rate"]), "--lr_scheduler", COMMON["lr_scheduler"],
        "--lr_warmup_steps", str(COMMON["lr_warmup_steps"]), "--max_grad_norm", str(COMMON["max_grad_norm"]),
        "--weighting_scheme", COMMON["weighting_scheme"], "--max_sequence_length", str(COMMON["max_sequence_length"]),
        "--seed", str(COMMON["seed"]), "--mixed_precision", precision, "--compile", compile_mode,
        # The example's default is no complex-human-instruction prefix; captions match that way.
        "--complex_human_instruction", "false",
        "--cache_dir", str(work / "cache"), "--output_dir", str(out), "--overwrite_output_dir",
        "--max_train_steps", str(steps), "--checkpointing_steps", "0", "--validation_prompt", "none",
        "--report_to", "none",
    ]


def diffusers_cmd(example: Path, work: Path, size: str, res: int, steps: int, out: Path,
                  batch: int = COMMON["batch"], precision: str = "bf16") -> list[str]:
    return [
        str(example), "--pretrained_model_name_or_path", str(work / "models" / size),
        "--dataset_name", str(work / "data" / f"shapes{res}_imagefolder"), "--caption_column", "text",
        "--instance_prompt", UNUSED_PROMPT,
        "--output_dir", str(out), "--resolution", str(res), "--center_crop", "--random_flip",
        "--train_batch_size", str(batch), "--max_train_steps", str(steps),
        "--rank", str(COMMON["rank"]), "--lora_alpha", str(COMMON["lora_alpha"]), "--lora_layers", COMMON["lora_layers"],
        "--learning_rate", str(COMMON["learning_rate"]), "--lr_scheduler", COMMON["lr_scheduler"],
        "--lr_warmup_steps", str(COMMON["lr_warmup_steps"]), "--max_grad_norm", str(COMMON["max_grad_norm"]),
        "--weighting_scheme", COMMON["weighting_scheme"], "--max_sequence_length", str(COMMON["max_sequence_length"]),
        "--seed", str(COMMON["seed"]), "--mixed_precision", precision, "--cache_latents",
        "--checkpointing_steps", str(10 * steps + 1000),  # never reached: no checkpoints
        # --report_to none is not accepted by accelerate; tensorboard is the example's default.
        "--report_to", "tensorboard",
    ]


# --------------------------------------------------------------------------------------------
# summary
# --------------------------------------------------------------------------------------------
def summarize(runs: list[dict], min_clean: int) -> list[dict]:
    """One row per (config, trainer), pooling the timed steps of all rounds; plus the derived row.

    Headline: the median over *clean* steps (other processes used < --clean_cores during the
    step) when there are at least ``min_clean`` of them; otherwise the median over all steps,
    marked ``noisy``.
    """
    rows = []
    configs = sorted({r["config"] for r in runs}, key=lambda c: (not c.startswith("tiny"), c))
    mine_variants = list(dict.fromkeys(r["variant"] for r in runs if r["variant"].startswith("dit-lora")))
    variants = [(v, v, False) for v in mine_variants] + [("diffusers", "diffusers", False), (DERIVED, "diffusers", True)]
    for config in configs:
        for label, variant, derived in variants:
            mine = [r for r in runs if r["config"] == config and r["variant"] == variant]
            if not mine:
                continue
            ok = [r for r in mine if "step_s" in r and (not derived or "step_text_encoding_s" in r)]
            if not ok:
                rows.append({"config": config, "trainer": label, "ok_runs": 0})
                continue
            steps_all, steps_clean, enc_clean = [], [], []
            for r in ok:
                enc = r.get("step_text_encoding_s") or [0.0] * len(r["step_s"])
                for t, c, e in zip(r["step_s"], r["step_clean"], enc):
                    value = t - e if derived else t
                    steps_all.append(value)
                    if c:
                        steps_clean.append(value)
                        enc_clean.append(e)
            noisy = len(steps_clean) < min_clean
            pool = steps_all if noisy else steps_clean
            med = statistics.median(pool)
            row = {
                "config": config, "trainer": label, "ok_runs": len(ok), "resolution": ok[0]["resolution"],
                "median_s_per_step": round(med, 5), "steps_per_s": round(1.0 / med, 3),
                "mean_s_per_step": round(sum(pool) / len(pool), 5),
                "clean_steps": len(steps_clean), "timed_steps": len(steps_all), "noisy": noisy,
                "median_s_per_step_all_steps": round(statistics.median(steps_all), 5),
                "per_run_median_s_per_step": [round(statistics.median(
                    [t - e for t, e in zip(r["step_s"], r.get("step_text_encoding_s") or [0.0] * len(r["step_s"]))]
                    if derived else r["step_s"]), 5) for r in ok],
                "peak_rss_mib": round(statistics.median(r["peak_rss_bytes"] for r in ok) / 2**20, 1),
                "train_rss_mib": round(statistics.median(r["train_rss_max_bytes"] for r in ok) / 2**20, 1),
                "startup_s": round(statistics.median(r["startup_s"] for r in ok), 1),
                # steps 1..warmup: the kernel-check step (1, eager) and, compiled, the steps that compile
                "warmup_s": round(statistics.median(sum(r.get("warmup_step_s", [])) for r in ok), 2),
                "warmup_step_s": ok[0].get("warmup_step_s"),
            }
            compiled = [(r.get("dit_lora_summary") or {}).get("compile") for r in ok]
            if any(compiled):
                c = next(x for x in compiled if x)
                row["compile"] = {k: c.get(k) for k in ("mode", "regions", "graphs", "graph_breaks",
                                                        "recompiles_after_warmup", "steps_that_compiled")}
            if variant == "diffusers" and enc_clean:
                row["text_encoding_median_s_per_step"] = round(statistics.median(enc_clean), 5)
            rows.append(row)
    base = {r["config"]: r for r in rows if r["trainer"] == "dit-lora" and r.get("ok_runs")}
    for r in rows:
        if r.get("ok_runs") and r["config"] in base:
            r["time_vs_dit_lora"] = round(r["median_s_per_step"] / base[r["config"]]["median_s_per_step"], 3)
            if "compile" in r:  # extra warm-up time over the eager run: the compile
                r["compile_s"] = round(r["warmup_s"] - base[r["config"]]["warmup_s"], 1)
    return rows


def markdown(rows: list[dict], env: dict) -> str:
    lines = [
        f"Device: {env['cpu_model']} ({env['cpu_cores']} cores; {', '.join(env['cpu_flags'])}), "
        f"torch {env['versions'].get('torch')} (CPU), {env['torch_threads']} intra-op threads, "
        f"diffusers {env['versions'].get('diffusers')}, peft {env['versions'].get('peft')}, "
        f"accelerate {env['versions'].get('accelerate')}, transformers {env['versions'].get('transformers')}.",
        "",
        "| config | trainer | steps/s | s/step (median) | s/step (mean) | clean / timed steps | "
        "s/step, all steps (median) | step time vs dit-lora | peak RSS (MiB) | RSS while training (MiB) | "
        "start-up (s) | warm-up steps (s) | compile (s) | graphs / breaks / recompiles | runs |",
        "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for r in rows:
        if not r.get("ok_runs"):
            lines.append(f"| {r['config']} | {r['trainer']} | failed | | | | | | | | | | | | 0 |")
            continue
        derived = r["trainer"] == DERIVED
        flag = " (noisy)" if r["noisy"] else ""
        lines.append(
            f"| {r['config']} ({r['resolution']} px) | {r['trainer']} | {r['steps_per_s']:.2f}{flag} | "
            f"{r['median_s_per_step']:.4f} | {r['mean_s_per_step']:.4f} | {r['clean_steps']}/{r['timed_steps']} | "
            f"{r['median_s_per_step_all_steps']:.4f} | {r.get('time_vs_dit_lora', 1.0):.2f}x | "
            + ("(same runs) | | | " if derived else
               f"{r['peak_rss_mib']:.0f} | {r['train_rss_mib']:.0f} | {r['startup_s']:.1f} | ")
            + f"{r['warmup_s']:.1f} | {r.get('compile_s', '')} | "
            + ("{graphs} / {graph_breaks} / {recompiles_after_warmup}".format(**r["compile"]) if "compile" in r else "")
            + f" | {r['ok_runs']} |"
        )
    return "\n".join(lines)


# --------------------------------------------------------------------------------------------
def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--diffusers_example", default=None, help="Path to diffusers' train_dreambooth_lora_sana.py (optional).")
    ap.add_argument("--example_python", default=None,
                    help="Python interpreter of an environment with torch, torchvision and diffusers to run the example "
                         "under (default: this one).")
    ap.add_argument("--out", default=str(BENCH / "vs_example_cpu.json"), help="Where the JSON results go.")
    ap.add_argument("--markdown", default=None, help="Also write the summary table to this file.")
    ap.add_argument("--work_dir", default=os.path.join(tempfile.gettempdir(), "dit-lora-bench-cpu"),
                    help="Models, data, caches, run outputs and logs (reused between invocations).")
    ap.add_argument("--configs", default="tiny,small", help="Comma-separated subset of tiny,small.")
    ap.add_argument("--variants", default=",".join(VARIANTS), help=f"Comma-separated subset of {','.join(VARIANTS)}.")
    ap.add_argument("--compile", default="off",
                    help="Comma-separated subset of off,blocks,full: dit-lora runs once per mode (--compile MODE); "
                         "compiled modes get a row 'dit-lora compile=MODE' beside the eager 'dit-lora'.")
    ap.add_argument("--batch_sizes", default=str(COMMON["batch"]),
                    help="Comma-separated batch sizes (configs other than batch 4 are named e.g. 'small-b1').")
    ap.add_argument("--mixed_precision", default="bf16", choices=("bf16", "no"),
                    help="Both trainers' --mixed_precision (bf16: the comparison's setting; `no` on CPUs without "
                         "AVX-512 BF16, where bf16 convolutions take a slow path).")
    ap.add_argument("--inductor_cache", default="per-run", choices=("per-run", "shared"),
                    help="per-run: a fresh TORCHINDUCTOR_CACHE_DIR per compiled run (cold compile, what a user's "
                         "first run pays); shared: one directory in --work_dir (warm after the first round).")
    ap.add_argument("--repeats", type=int, default=3, help="Interleaved rounds; the summary is the median over rounds.")
    ap.add_argument("--tiny_steps", type=int, default=120)
    ap.add_argument("--small_steps", type=int, default=20)
    ap.add_argument("--warmup_steps", type=int, default=4, help="Steps excluded from the timing at the start of each run.")
    ap.add_argument("--small_resolution", type=int, default=256, help="Multiple of 8 (the small DC-AE's stride).")
    ap.add_argument("--quiet_cores", type=float, default=0.3,
                    help="Before a run, wait until other processes use fewer CPU cores than this ...")
    ap.add_argument("--max_wait_s", type=float, default=20.0, help="... but at most this long, then run anyway.")
    ap.add_argument("--clean_cores", type=float, default=0.15,
                    help="A step is 'clean' when other processes used fewer CPU cores than this during it.")
    ap.add_argument("--min_clean_steps", type=int, default=5,
                    help="Report the median of clean steps when there are at least this many, else of all steps.")
    args = ap.parse_args(argv)

    def log(msg: str) -> None:
        print(msg, flush=True)

    configs = [c for c in args.configs.split(",") if c]
    compile_modes = [m for m in args.compile.split(",") if m]
    if any(m not in ("off", "blocks", "full") for m in compile_modes):
        ap.error("--compile takes off, blocks and/or full")
    batch_sizes = [int(b) for b in args.batch_sizes.split(",") if b]
    variants = [v for v in args.variants.split(",") if v]
    for v in variants:
        if v not in VARIANTS:
            ap.error(f"unknown variant {v!r}; choose from {VARIANTS}")
    sizes = {"tiny": 64, "small": args.small_resolution}
    if any(c not in sizes for c in configs):
        ap.error("--configs takes tiny and/or small")
    if args.small_resolution % 8:
        ap.error("--small_resolution must be a multiple of 8 (the small model's DC-AE stride)")
    steps_for = {"tiny": args.tiny_steps, "small": args.small_steps}
    if min(steps_for[c] for c in configs) < args.warmup_steps + 3:
        ap.error("need at least warmup_steps + 3 steps per run")

    notes: list[str] = []
    example = Path(args.diffusers_example).resolve() if args.diffusers_example else None
    if example is None or not example.is_file():
        msg = ("diffusers comparison SKIPPED: " + ("--diffusers_example not given" if example is None else f"{example} not found")
               + " (get examples/dreambooth/train_dreambooth_lora_sana.py from github.com/huggingface/diffusers "
               "and pass its path).")
        log(msg)
        notes.append(msg)
        variants = [v for v in variants if v == "dit-lora"]
        example = None

    work = Path(args.work_dir).resolve()
    work.mkdir(parents=True, exist_ok=True)
    env = child_environment()  # PYTHONPATH kept, this checkout first: the children run this checkout's code

    diffusers_env = dict(env, STEP_TIMER_TIME_CALLS=ENCODE_CALL)
    example_python = args.example_python or sys.executable
    if example is not None and "diffusers" in variants:
        probe = subprocess.run([example_python, "-c", "import torch, torchvision, diffusers"], capture_output=True,
                               text=True, env=env)
        if probe.returncode != 0:
            last = (probe.stderr.strip().splitlines() or ["no output"])[-1]
            msg = (f"diffusers comparison SKIPPED: the example needs torch, torchvision and diffusers, and "
                   f"{example_python} cannot import them ({last}). Pass --example_python with an environment "
                   "that has them.")
            log(msg)
            notes.append(msg)
            variants = [v for v in variants if v == "dit-lora"]
            example = None

    environment = machine_environment(env)
    versions = environment["versions"]
    environment.update(diffusers_example=str(example) if example else None,
                       example_python=example_python if example else None)
    if example is not None:
        import hashlib

        environment["diffusers_example_sha256"] = hashlib.sha256(example.read_bytes()).hexdigest()
    log(f"device: {environment['cpu_model']}, {environment['cpu_cores']} cores, torch {versions['torch']}, "
        f"{environment['torch_threads']} threads; work dir {work}")

    t_start = time.perf_counter()
    log("building models and data sets ...")
    build_assets(work, {c: sizes[c] for c in configs}, env)

    runs: list[dict] = []
    jobs = []  # (variant label, trainer, compile mode)
    for variant in variants:
        if variant == "dit-lora":
            jobs += [("dit-lora" if m == "off" else f"dit-lora compile={m}", variant, m) for m in compile_modes]
        else:
            jobs.append((variant, variant, "off"))
    for rnd in range(args.repeats):
        for config in configs:
          for batch in batch_sizes:
            res, steps = sizes[config], steps_for[config]
            label = config if batch == COMMON["batch"] else f"{config}-b{batch}"
            for vlabel, variant, mode in jobs:
                name = f"{label}-{vlabel.replace(' compile=', '-')}-r{rnd}"
                out = work / "runs" / name
                if variant == "dit-lora":
                    script_argv = dit_lora_cmd(work, config, res, steps, out, batch, mode, args.mixed_precision)
                    child_env, python = dict(env), sys.executable
                    if mode != "off":
                        cache = work / "inductor" / (name if args.inductor_cache == "per-run" else "shared")
                        if args.inductor_cache == "per-run":
                            shutil.rmtree(cache, ignore_errors=True)
                        child_env["TORCHINDUCTOR_CACHE_DIR"] = str(cache)
                else:
                    script_argv = diffusers_cmd(example, work, config, res, steps, out, batch, args.mixed_precision)
                    child_env = diffusers_env
                    python = example_python
                shutil.rmtree(out, ignore_errors=True)
                log(f"[round {rnd + 1}/{args.repeats}] {label} ({res} px, batch {batch}, {steps} steps) {vlabel}")
                quiet = wait_for_quiet(args.quiet_cores, args.max_wait_s, log)
                result = run_once(name, script_argv, child_env, work / "logs", args.warmup_steps, steps, quiet,
                                  args.clean_cores, log, python=python,
                                  time_call=ENCODE_CALL if variant == "diffusers" else None)
                result.update(config=label, variant=vlabel, resolution=res, batch=batch, compile=mode, round=rnd)
                runs.append(result)
                shutil.rmtree(out, ignore_errors=True)

    rows = summarize(runs, args.min_clean_steps)
    noisy = [f"{r['config']}/{r['trainer']}" for r in rows if r.get("noisy")]
    if noisy:
        notes.append(f"fewer than {args.min_clean_steps} clean steps for {', '.join(noisy)}: their numbers are the "
                     "median of all steps, inflated by other processes' load")
    results = {
        "benchmark": "sana/vs_example_cpu", "created": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        "total_time_s": round(time.perf_counter() - t_start, 1), "environment": environment,
        "settings": {**COMMON, "resolutions": {c: sizes[c] for c in configs}, "steps": {c: steps_for[c] for c in configs},
                     "warmup_steps": args.warmup_steps, "repeats": args.repeats, "variants": variants,
                     "compile": compile_modes, "batch_sizes": batch_sizes, "mixed_precision": args.mixed_precision,
                     "inductor_cache": args.inductor_cache,
                     "quiet_cores": args.quiet_cores, "max_wait_s": args.max_wait_s, "clean_cores": args.clean_cores,
                     "min_clean_steps": args.min_clean_steps},
        "summary": rows, "notes": notes, "runs": runs,
    }
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(results, indent=2) + "\n")
    table = markdown(rows, environment)
    if args.markdown:
        Path(args.markdown).write_text(table + "\n")
    log("\n" + table)
    for n in notes:
        log(f"note: {n}")
    log(f"\nresults: {args.out} (total {results['total_time_s']:.0f} s)")
    return 0 if all(r.get("ok_runs") for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
