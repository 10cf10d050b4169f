#!/usr/bin/env python
"""The memory planner against real runs on a CPU: predicted vs measured peak memory per setting.

    HF_HUB_OFFLINE=1 python benchmarks/plan/vs_cpu_runs.py --out benchmarks/plan/vs_cpu_runs.json \
        --markdown /tmp/plan_validation.md

Each setting runs a real recipe (``recipes/<family>_lora.py``) in a fresh child process for 12 optimizer
updates (on a CPU the heap one step leaves is where the next starts) on a checkpoint folder laid out as the
Hub has it, built offline by ``tests/support/real_layout.py``
from the catalogue's configs: real widths, head counts, tokenizer file sets and VAE stages, random weights,
the transformer cut to 1-2 blocks (and the text encoder to one layer with the local tokenizer's vocabulary,
the VAE to narrow channels). The run plans itself at start (``memory plan: predicted peak ...``) and writes
both figures to ``train_summary.json``: ``memory_plan.peak_memory_bytes`` (the prediction) and
``peak_memory_bytes`` (on a CPU the process's ``VmHWM``: its peak resident set over its whole life,
loading and latent caching included). The error is (predicted - measured) / measured.

Every run gets a fresh latent cache (the caching phase, with every component loaded, is part of the peak),
``--mixed_precision no`` unless the setting says otherwise (bf16 matmuls at these widths are about 10x
slower on a CPU), ``--gradient_accumulation_steps 1``, no validation and no checkpoints. Beside the two
figures the script records, from ``/proc/<pid>/status`` of the child (``benchmarks/common/rss_watch.py``),
the peak RSS so far (``VmHWM``) when the run prints its phase lines (after the plan, after loading, after
caching, at the start of training) and the largest RSS sampled during training, so a miss can be put down
to a phase.
"""

from __future__ import annotations

import argparse
import importlib.metadata
import json
import os
import platform
import shutil
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "tests" / "support"))

from benchmarks.common.rss_watch import rank_zero, watch  # noqa: E402

MIB = 2**20
#: the log lines whose moment is recorded (peak RSS so far, current RSS), in the order a run prints them
MARKS = ("memory plan:", "latent cache", "caption tokens", "kernels:", "attention canary:", "trainable parameter groups:",
         "training:", "adapter written")
COMMON = ["--max_train_steps", "12", "--report_to", "none", "--skip_doctor", "true", "--checkpointing_steps", "0",
          "--gradient_accumulation_steps", "1", "--seed", "0", "--overwrite_output_dir", "true"]

#: name -> (recipe, model key, data key, flags); model keys are built by ``build_models``
SETTINGS: dict[str, tuple[str, str, str, list[str]]] = {
    "sana-256-b1": ("sana", "sana600m-2l", "shapes", ["--resolution", "256", "--train_batch_size", "1"]),
    "sana-512-b1": ("sana", "sana600m-2l", "shapes", ["--resolution", "512", "--train_batch_size", "1"]),
    "sana-512-b4-gc": ("sana", "sana600m-2l", "shapes", ["--resolution", "512", "--train_batch_size", "4",
                                                         "--gradient_checkpointing", "true"]),
    "sana-256-b2-bf16": ("sana", "sana600m-2l", "shapes", ["--resolution", "256", "--train_batch_size", "2",
                                                           "--mixed_precision", "bf16"]),
    "dit-256-b1": ("dit_class", "dit-xl-256-2l", "wnids", ["--train_batch_size", "1"]),
    "dit-256-b4": ("dit_class", "dit-xl-256-2l", "wnids", ["--train_batch_size", "4"]),
    "dit-256-b4-gc": ("dit_class", "dit-xl-256-2l", "wnids", ["--train_batch_size", "4",
                                                              "--gradient_checkpointing", "true"]),
    # --quantize_base fp8_scaled (issue 35): the converted weights, the loading phase and one dequantized Linear
    "sana-256-b1-fp8": ("sana", "sana600m-2l", "shapes", ["--resolution", "256", "--train_batch_size", "1",
                                                          "--quantize_base", "fp8_scaled"]),
    "dit-256-b4-gc-fp8": ("dit_class", "dit-xl-256-2l", "wnids", ["--train_batch_size", "4",
                                                                  "--gradient_checkpointing", "true",
                                                                  "--quantize_base", "fp8_scaled"]),
    # --gradient_checkpointing on/off and --blocks_to_swap (issue 35's ladder: each lever's prediction against a run;
    # beside sana-256-b1, dit-256-b4 and dit-256-b4-gc). With --activation_offloading the plan claims no saving on a
    # CPU (the host is the device): its prediction equals the setting without it, checked against the run.
    "sana-256-b1-gc": ("sana", "sana600m-2l", "shapes", ["--resolution", "256", "--train_batch_size", "1",
                                                         "--gradient_checkpointing", "true"]),
    "sana-256-b1-swap1": ("sana", "sana600m-2l", "shapes", ["--resolution", "256", "--train_batch_size", "1",
                                                            "--blocks_to_swap", "1"]),
    "sana-256-b1-gc-offload": ("sana", "sana600m-2l", "shapes", ["--resolution", "256", "--train_batch_size", "1",
                                                                 "--gradient_checkpointing", "true",
                                                                 "--activation_offloading", "true"]),
    "dit-256-b4-offload": ("dit_class", "dit-xl-256-2l", "wnids", ["--train_batch_size", "4",
                                                                   "--activation_offloading", "true"]),
    "dit-256-b4-gc-swap1": ("dit_class", "dit-xl-256-2l", "wnids", ["--train_batch_size", "4",
                                                                    "--gradient_checkpointing", "true",
                                                                    "--blocks_to_swap", "1"]),
    # 2 gloo processes (issue 35): DDP and FSDP2, the same flags as sana-256-b1, launched as LAUNCH says
    "sana-256-b1-ddp2": ("sana", "sana600m-2l", "shapes", ["--resolution", "256", "--train_batch_size", "1"]),
    "sana-256-b1-fsdp2x2": ("sana", "sana600m-2l", "shapes", ["--resolution", "256", "--train_batch_size", "1"]),
    "dit-256-b4-gc-ddp2": ("dit_class", "dit-xl-256-2l", "wnids", ["--train_batch_size", "4",
                                                                   "--gradient_checkpointing", "true"]),
    "dit-256-b4-gc-fsdp2x2": ("dit_class", "dit-xl-256-2l", "wnids", ["--train_batch_size", "4",
                                                                      "--gradient_checkpointing", "true"]),
    "cogvideox5b-9x256x256": ("cogvideox", "cogvideox-5b-1l", "clips",
                              ["--max_num_frames", "9", "--height", "256", "--width", "256",
                               "--allow_untrained_resolution", "true", "--train_batch_size", "1"]),
}

#: settings run on several processes: `dit-lora launch` with these flags (CPU, gloo); the figures are rank 0's
#: (``train_summary.json`` is written by it; the watcher follows the process whose environment says RANK=0)
_DDP2 = ["--multi_gpu", "--num_processes", "2", "--num_machines", "1", "--dynamo_backend", "no"]
_FSDP2X2 = ["--config_file", str(REPO / "accelerate_configs" / "fsdp2.yaml"), "--num_processes", "2"]
LAUNCH: dict[str, list[str]] = {"sana-256-b1-ddp2": _DDP2, "sana-256-b1-fsdp2x2": _FSDP2X2,
                                "dit-256-b4-gc-ddp2": _DDP2, "dit-256-b4-gc-fsdp2x2": _FSDP2X2}

#: what each model key is: (real_layout builder, hub id, layers, description)
MODELS = {
    "sana600m-2l": ("sana_pipeline", "Efficient-Large-Model/Sana_600M_1024px_diffusers", 2,
                    "Sana 600M widths (1152 wide, 36 heads), 2 of 28 blocks; Gemma-2 2B widths, 1 layer"),
    "dit-xl-256-2l": ("dit_pipeline", "facebook/DiT-XL-2-256", 2,
                      "DiT-XL/2 widths (1152 wide, 16 heads), 2 of 28 blocks; SD VAE widths, 1 layer per block"),
    "cogvideox-5b-1l": ("cogvideox_pipeline", "THUDM/CogVideoX-5b", 1,
                        "CogVideoX-5b widths (3072 wide, 48 heads), 1 of 42 blocks; T5-XXL widths, 1 layer"),
}

#: ImageNet folders (wnids) the DiT data uses, so the checkpoint's 1000 class rows are reused as published
WNIDS = {"0": ("n01440764", "tench, Tinca tinca"), "1": ("n01443537", "goldfish, Carassius auratus"),
         "2": ("n01484850", "great white shark, white shark")}


def model_folder(work: Path, key: str) -> Path:
    return work / "models" / key / MODELS[key][1].split("/")[-1]


def data_folder(work: Path, key: str) -> Path:
    return work / "data" / key


def build_models(work: Path, keys: set[str]) -> None:
    import real_layout

    for key in sorted(keys):
        builder, hub_id, layers, _ = MODELS[key]
        root = work / "models" / key
        if not (root / ".complete").exists():
            shutil.rmtree(root, ignore_errors=True)
            kwargs = {"labels": {i: label for i, (_, label) in WNIDS.items()}} if builder == "dit_pipeline" else {}
            getattr(real_layout, builder)(root, hub_id, layers=layers, **kwargs)
            (root / ".complete").write_text("")


def build_data(work: Path, keys: set[str]) -> None:
    """``shapes``: 8 captioned 512 px images; ``wnids``: 8 images in ImageNet class folders; ``clips``: 2 clips
    of 9 frames at 256 x 256."""
    from dit_lora.data.synthetic.clips import make_moving_square_dataset
    from dit_lora.data.synthetic.shapes import make_shapes_class_dataset, make_shapes_dataset

    if "shapes" in keys:
        make_shapes_dataset(data_folder(work, "shapes"), n=8, size=512, seed=0)
    if "wnids" in keys:
        classes = make_shapes_class_dataset(work / "data" / "shape-classes", n=8, size=256, seed=0)
        wnids = data_folder(work, "wnids")
        if not wnids.exists():
            for (wnid, _), cls in zip(WNIDS.values(), sorted(p for p in classes.iterdir() if p.is_dir())):
                shutil.copytree(cls, wnids / wnid)
    if "clips" in keys:
        make_moving_square_dataset(data_folder(work, "clips"), n=2, num_frames=9, size=256, seed=0)


def run_setting(name: str, model: Path, data: Path, work: Path, env: dict, timeout: float) -> dict:
    recipe, model_key, _, flags = SETTINGS[name]
    out, cache = work / "runs" / name, work / "runs" / f"{name}-cache"
    shutil.rmtree(cache, ignore_errors=True)  # every run builds its cache: that phase is part of the peak
    args = ["--pretrained_model_name_or_path", str(model), "--train_data_dir", str(data), "--output_dir", str(out),
            "--cache_dir", str(cache), *COMMON]
    if "--mixed_precision" not in flags:
        args += ["--mixed_precision", "no"]
    script = [str(REPO / "recipes" / f"{recipe}_lora.py"), *args, *flags]
    launch = LAUNCH.get(name)
    cmd = [sys.executable, *(["-m", "dit_lora", "launch", *launch] if launch else []), *script]
    watched = watch(cmd, MARKS, env=env, cwd=REPO, timeout=timeout, follow=rank_zero if launch else None)
    (work / "logs").mkdir(parents=True, exist_ok=True)
    (work / "logs" / f"{name}.log").write_text(watched.output)
    row = {"setting": name, "recipe": recipe, "model": model_key, "model_description": MODELS[model_key][3],
           "flags": flags, "launch": launch or [], "returncode": watched.returncode, "wall_s": watched.wall_s,
           "ru_maxrss_bytes": watched.ru_maxrss_bytes, "marks": watched.marks,
           "rss_max_after_last_mark": watched.rss_max_after_last_mark, "log": str(work / "logs" / f"{name}.log")}
    if watched.returncode != 0:
        row["failure"] = watched.output[-3000:]
        return row
    summary = json.loads((out / "train_summary.json").read_text())
    plan = summary["memory_plan"]
    predicted, measured = plan["peak_memory_bytes"], summary["peak_memory_bytes"]
    training_marks = [m for m in watched.marks if m["mark"] == "training:"]
    row.update(predicted_bytes=predicted, measured_bytes=measured, error=(predicted - measured) / measured,
               plan={k: plan[k] for k in ("weights", "process_bytes", "cache_phase_bytes", "train_phase_bytes",
                                          "optimizer_bytes", "snapshot_bytes", "trainable_params", "steps",
                                          "checkpointing", "depth", "load_phase_bytes", "mapped", "heap_factor", "engine",
                                          "num_processes", "launch_bytes",
                                          "heap_factor_checkpointed", "blocks_to_swap", "swapped_bytes",
                                          "swap_in_flight_bytes")
                     if k in plan},
               measured_phases={
                   "setup_peak_bytes": training_marks[0]["hwm"] if training_marks else None,
                   "train_rss_max_bytes": _train_rss_max(watched),
               },
               gradient_checkpointing=summary["gradient_checkpointing"], steps=summary["steps"])
    return row


def _train_rss_max(watched) -> int | None:
    """Largest RSS sampled from the ``training:`` line to the end of the run."""
    names = [m["mark"] for m in watched.marks]
    if "training:" not in names:
        return None
    after = watched.marks[names.index("training:") + 1:]
    return max([m["rss_max_since_last"] for m in after] + [watched.rss_max_after_last_mark])


def environment() -> dict:
    cpu = "unknown"
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    versions = {}
    for pkg in ("torch", "diffusers", "transformers", "peft", "accelerate", "safetensors"):
        try:
            versions[pkg] = importlib.metadata.version(pkg)
        except importlib.metadata.PackageNotFoundError:
            versions[pkg] = None
    ram = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    return {"cpu_model": cpu, "cpu_cores": os.cpu_count(), "ram_bytes": ram, "python": platform.python_version(),
            "platform": platform.platform(), "versions": versions}


def _mib(n) -> str:
    return "-" if n is None else f"{n / MIB:,.0f}"


def markdown(rows: list[dict], env: dict) -> str:
    lines = [f"Device: {env['cpu_model']}, {env['cpu_cores']} cores, {env['ram_bytes'] / 2**30:.1f} GiB RAM; "
             f"torch {env['versions']['torch']}, diffusers {env['versions']['diffusers']}.", "",
             "| setting | model (width / depth) | flags | predicted (MiB) | measured peak RSS (MiB) | error | "
             "of which: process at plan (MiB) | setup peak (MiB) | training RSS max (MiB) |",
             "|---|---|---|---:|---:|---:|---:|---:|---:|"]
    for r in rows:
        if "predicted_bytes" not in r:
            lines.append(f"| {r['setting']} | {r['model_description']} | `{' '.join(r['flags'])}` | failed "
                         f"(rc {r['returncode']}) | | | | | |")
            continue
        lines.append(f"| {r['setting']} | {r['model_description']} | `{' '.join(r['flags'])}` | "
                     f"{_mib(r['predicted_bytes'])} | {_mib(r['measured_bytes'])} | {r['error']:+.1%} | "
                     f"{_mib(r['plan']['process_bytes'])} | {_mib(r['measured_phases']['setup_peak_bytes'])} | "
                     f"{_mib(r['measured_phases']['train_rss_max_bytes'])} |")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--settings", default=",".join(SETTINGS), help=f"comma-separated, of: {', '.join(SETTINGS)}")
    ap.add_argument("--work_dir", default="/tmp/dit-lora-plan-validation",
                    help="models, data, runs and per-run logs (logs/<setting>.log)")
    ap.add_argument("--out", help="JSON results file (environment and every row)")
    ap.add_argument("--markdown", help="write the table here too")
    ap.add_argument("--timeout", type=float, default=600, help="seconds per run")
    ap.add_argument("--build_only", action="store_true", help="build the models and data sets, run nothing")
    ap.add_argument("--tolerance", type=float, default=0.15, help="exit 1 when any |error| exceeds this")
    args = ap.parse_args(argv)
    names = [s for s in args.settings.split(",") if s]
    unknown = [s for s in names if s not in SETTINGS]
    if unknown:
        ap.error(f"unknown settings {unknown}; known: {', '.join(SETTINGS)}")
    work = Path(args.work_dir)
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "PYTHONUNBUFFERED": "1"}
    os.environ["HF_HUB_OFFLINE"] = "1"
    started = time.perf_counter()
    model_keys, data_keys = sorted({SETTINGS[s][1] for s in names}), sorted({SETTINGS[s][2] for s in names})
    if args.build_only:
        build_models(work, set(model_keys))
        build_data(work, set(data_keys))
        return 0
    # Built in a child: this process stays small (it launches every run, and a run's ru_maxrss would carry
    # a big launcher's resident size; train_summary.json reads VmHWM, which does not).
    subprocess.run([sys.executable, __file__, "--build_only", "--work_dir", str(work), "--settings", ",".join(names)],
                   env=env, check=True)
    models = {key: model_folder(work, key) for key in model_keys}
    data = {key: data_folder(work, key) for key in data_keys}
    print(f"models and data ready in {time.perf_counter() - started:.0f} s under {work}", flush=True)
    rows = []
    for name in names:
        _, model_key, data_key, _ = SETTINGS[name]
        row = run_setting(name, models[model_key], data[data_key], work, env, args.timeout)
        rows.append(row)
        if "predicted_bytes" in row:
            print(f"{name:24s} predicted {_mib(row['predicted_bytes']):>7s} MiB  measured "
                  f"{_mib(row['measured_bytes']):>7s} MiB  error {row['error']:+6.1%}  ({row['wall_s']:.0f} s)",
                  flush=True)
        else:
            print(f"{name:24s} FAILED (rc {row['returncode']}), log {row['log']}\n{row['failure'][-1500:]}", flush=True)
    env_info = environment()
    table = markdown(rows, env_info)
    print("\n" + table)
    if args.out:
        Path(args.out).write_text(json.dumps({"environment": env_info, "rows": rows}, indent=1) + "\n")
    if args.markdown:
        Path(args.markdown).write_text(table)
    bad = [r for r in rows if "predicted_bytes" not in r or abs(r["error"]) > args.tolerance]
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
