#!/usr/bin/env python
"""The caching phase on 1,000 images of mixed sizes and aspect ratios, before and after issue 33 (CPU).

    git worktree add /tmp/before33 78824c8     # issue 33's parent: square crops, no progress bar
    HF_HUB_OFFLINE=1 python benchmarks/data/caching_cpu.py --before /tmp/before33 --resolutions 64,256 \\
        --repeats 2 --threads 1 --out benchmarks/data/caching_cpu.json
    python benchmarks/data/caching_cpu.py --smoke      # 20 images, this checkout only, checks the measuring

The data set (generated once into ``--work_dir``, never into the repository; deterministic from ``--seed``): 60%
of the images at 4:3, 3:4, 16:9, 9:16 or 1:1, 32% at a random aspect ratio between 1:2 and 2:1, 4% at 3:1 and 4% at
1:3; the long side 256 to 1024 px; 70% JPEG (quality 90), 30% PNG; smooth colour fields with shapes and a little
noise (so neither format compresses them to nothing); a ``metadata.jsonl`` caption per image.

Each checkout (``after``: this repository; ``before``: ``--before DIR``, a checkout of another commit, e.g. issue
33's parent ``78824c8``) trains the Sana offline demo model (``recipes/configs/sana/demo.yaml``'s options: the tiny
random Sana, ``--resolution`` 64, ``--random_flip``, batch 4) on that folder for one step with a fresh
``--cache_dir``, in a fresh child process (``python -m dit_lora train``, ``PYTHONPATH`` the checkout, so each times
its own code). Both versions accept the same flags; neither is told anything about buckets (``after`` buckets by
aspect ratio by default, ``before`` crops squares).

How the caching phase is timed: every line the child prints is stamped when it arrives (the child is unbuffered).
The phase starts at the line both versions print just before they encode (``latent cache ...: 0/N samples already
cached``) and ends at their last progress line (``cached N/N`` before, ``caching N/N`` after): decoding, resizing,
the VAE's encode of each image and its flip, the caption's encode and the cache files' writes. Screening (reading
each file, choosing its bucket) comes before that line and is timed apart with what else runs there, from the last
line of the text encoder's loading (``Loading weights``, transformers' bar) to the phase's start (``pre_phase_s``, and
the child's CPU seconds over it, ``pre_phase_cpu_s``). The rate: images / phase seconds. Pixels encoded: read from the cache
files the run wrote (each latent's height x width x the VAE's factor squared, the flip counted), so before's squares
and after's buckets are counted alike; the source pixels decoded (the files' own sizes) are the same for both.
Other processes' CPU use over the phase is sampled (``benchmarks/common/cpu_harness.CpuMonitor``) and recorded, and
so is the child's own CPU time over the phase (``caching_cpu_s``, ``images_per_cpu_s``): on a shared machine with
``--threads 1`` (``OMP_NUM_THREADS`` of the children) it is what the phase costs, the wall time also what the other
jobs took. ``--repeats R`` runs before and after back to back R times per ``--resolutions`` value; the summary gives
each figure's median, minimum, maximum and spread.
"""

from __future__ import annotations

import argparse
import bisect
import json
import math
import os
import random
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
if __package__ in (None, ""):
    sys.path.insert(0, str(REPO))
from benchmarks.common.cpu_harness import CLK_TCK, CpuMonitor, machine_environment  # noqa: E402

#: (aspect ratio as width / height, share of the data set); the rest is drawn between 1:2 and 2:1
COMMON_RATIOS = ((4 / 3, 0.12), (3 / 4, 0.12), (16 / 9, 0.12), (9 / 16, 0.12), (1.0, 0.12))
EXTREME_RATIOS = ((3.0, 0.04), (1 / 3, 0.04))
LONG_SIDE = (256, 1024)
JPEG_SHARE = 0.7
DATA_VERSION = 1  # bump when the generator changes: a folder written by another version is rebuilt
#: the demo's options (recipes/configs/sana/demo.yaml) a one-step caching run keeps
DEMO_OPTIONS = {
    "family": "sana",
    "demo": "true",
    "demo_size": "tiny",
    "resolution": "64",
    "center_crop": "true",
    "random_flip": "true",
    "rank": "8",
    "lora_alpha": "16",
    "train_batch_size": "4",
    "learning_rate": "1e-3",
    "max_train_steps": "1",
    "checkpointing_steps": "1000",
    "validation_steps": "1000",
    "report_to": "tensorboard",
    "seed": "0",
    "overwrite_output_dir": "true",
}
PHASE_START = re.compile(r"latent cache .*: 0/(\d+) samples already cached")
PHASE_PROGRESS = re.compile(r"\bcach(?:ed|ing) (\d+)/(\d+) samples")


# --------------------------------------------------------------------------------------------
# the data set
# --------------------------------------------------------------------------------------------
def image_plan(n: int, seed: int) -> list[dict]:
    """Each image's size, format and caption, deterministic from ``seed``."""
    rng = random.Random(seed)
    shares = COMMON_RATIOS + EXTREME_RATIOS
    counts = [round(n * share) for _, share in shares]
    ratios = [r for (r, _), c in zip(shares, counts) for _ in range(c)]
    ratios += [math.exp(rng.uniform(math.log(0.5), math.log(2.0))) for _ in range(max(0, n - len(ratios)))]
    ratios = ratios[:n]
    rng.shuffle(ratios)
    plan = []
    for i, ratio in enumerate(ratios):
        long_side = rng.randint(*LONG_SIDE)
        width, height = (long_side, round(long_side / ratio)) if ratio >= 1 else (round(long_side * ratio), long_side)
        fmt = "jpg" if rng.random() < JPEG_SHARE else "png"
        colour, shape = rng.choice(("red", "green", "blue", "yellow", "white")), rng.choice(("circle", "square"))
        plan.append(
            {
                "file_name": f"{i:05d}.{fmt}",
                "width": width,
                "height": height,
                "text": f"a {colour} {shape} on a textured background",
                "seed": rng.randrange(2**31),
            }
        )
    return plan


def draw(entry: dict):
    """One image: a smooth colour field (a small random image scaled up), a shape and mild noise."""
    import numpy as np
    from PIL import Image, ImageDraw

    rng = np.random.default_rng(entry["seed"])
    width, height = entry["width"], entry["height"]
    field = Image.fromarray(rng.integers(0, 256, (6, 6, 3), dtype=np.uint8)).resize((width, height), Image.BICUBIC)
    pixels = np.asarray(field, dtype=np.int16) + rng.integers(-12, 13, (height, width, 1), dtype=np.int16)
    image = Image.fromarray(pixels.clip(0, 255).astype(np.uint8))
    side = min(width, height) // 3
    x, y = int(rng.integers(0, width - side)), int(rng.integers(0, height - side))
    box = (x, y, x + side, y + side)
    fill = tuple(int(v) for v in rng.integers(0, 256, 3))
    pen = ImageDraw.Draw(image)
    (pen.ellipse if "circle" in entry["text"] else pen.rectangle)(box, fill=fill)
    return image


def make_dataset(folder: Path, n: int, seed: int, log) -> dict:
    """Write (or reuse, when the marker matches) ``n`` images and their ``metadata.jsonl``; returns its description."""
    marker = folder / "caching_cpu_data.json"
    want = {"version": DATA_VERSION, "n": n, "seed": seed}
    plan = image_plan(n, seed)
    if marker.exists() and json.loads(marker.read_text()) == want:
        log(f"data set: reusing {folder}")
    else:
        shutil.rmtree(folder, ignore_errors=True)
        folder.mkdir(parents=True)
        started = time.perf_counter()
        for entry in plan:
            image = draw(entry)
            path = folder / entry["file_name"]
            image.save(path, quality=90) if path.suffix == ".jpg" else image.save(path, compress_level=6)
        lines = [json.dumps({"file_name": e["file_name"], "text": e["text"]}) for e in plan]
        (folder / "metadata.jsonl").write_text("\n".join(lines) + "\n")
        marker.write_text(json.dumps(want))
        log(f"data set: wrote {n} images to {folder} in {time.perf_counter() - started:.1f} s")
    return describe_dataset(folder, plan)


def describe_dataset(folder: Path, plan: list[dict]) -> dict:
    """Counts by format and aspect ratio, the source pixels and bytes."""

    def kind(e: dict) -> str:
        ratio = e["width"] / e["height"]
        for name, r in (
            ("4:3", 4 / 3),
            ("3:4", 3 / 4),
            ("16:9", 16 / 9),
            ("9:16", 9 / 16),
            ("1:1", 1.0),
            ("3:1", 3.0),
            ("1:3", 1 / 3),
        ):
            if abs(math.log(ratio / r)) < 0.01:
                return name
        return "other (1:2 to 2:1)"

    return {
        "images": len(plan),
        "folder": str(folder),
        "formats": dict(Counter(Path(e["file_name"]).suffix[1:] for e in plan)),
        "aspect_ratios": dict(Counter(kind(e) for e in plan)),
        "source_megapixels": round(sum(e["width"] * e["height"] for e in plan) / 1e6, 2),
        "source_bytes": sum((folder / e["file_name"]).stat().st_size for e in plan),
        "long_side_px": list(LONG_SIDE),
    }


# --------------------------------------------------------------------------------------------
# one run
# --------------------------------------------------------------------------------------------
def train_argv(work: Path, data: Path, resolution: int) -> list[str]:
    """``python -m dit_lora train`` with the demo's options, one step, everything under ``work``."""
    options = {
        **DEMO_OPTIONS,
        "resolution": str(resolution),
        "pretrained_model_name_or_path": str(work / "tiny-sana"),
        "train_data_dir": str(data),
        "output_dir": str(work / "output"),
        "cache_dir": str(work / "cache"),
    }
    argv = [sys.executable, "-m", "dit_lora", "train"]
    for key, value in options.items():
        argv += [f"--{key}", value]
    return argv


def stamped_run(
    argv: list[str], env: dict, cwd: Path, log_file: Path
) -> tuple[int, list[tuple[float, str]], CpuMonitor, float]:
    """Run ``argv``; every line of its output (stdout and stderr) with the time it arrived (``perf_counter``)."""
    lines: list[tuple[float, str]] = []
    started = time.perf_counter()
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, env=env, cwd=str(cwd))
    monitor = CpuMonitor(proc.pid)
    monitor.start()
    assert proc.stdout is not None
    with open(log_file, "w", buffering=1) as fh:  # line-buffered: a running benchmark's log can be read
        fh.write(" ".join(argv) + "\n\n")
        for raw in proc.stdout:
            now = time.perf_counter()
            # a tqdm bar on stderr redraws with carriage returns: its last state is what the line says
            text = raw.decode(errors="replace").rstrip("\n").split("\r")[-1]
            lines.append((now, text))
            fh.write(f"{now - started:9.3f}  {text}\n")
    code = proc.wait()
    monitor.stop()
    return code, lines, monitor, started


def caching_phase(lines: list[tuple[float, str]]) -> dict:
    """The phase's bounds from the stamped lines (the module docstring); the line before it, for ``pre_phase_s``."""
    start = next((i for i, (_, text) in enumerate(lines) if PHASE_START.search(text)), None)
    if start is None:
        raise RuntimeError("no 'latent cache ...: 0/N samples already cached' line: the cache was not fresh")
    total = int(PHASE_START.search(lines[start][1]).group(1))  # type: ignore[union-attr]
    progress = [i for i, (_, text) in enumerate(lines) if i > start and PHASE_PROGRESS.search(text)]
    last = [i for i in progress if PHASE_PROGRESS.search(lines[i][1]).group(1) == str(total)]  # type: ignore[union-attr]
    if not last:
        raise RuntimeError(f"no progress line saying {total}/{total} samples after the phase's start")
    loaded = [i for i, (_, text) in enumerate(lines[:start]) if text.startswith("Loading weights")]
    return {
        "samples": total,
        "start": lines[start][0],
        "end": lines[last[-1]][0],
        "pre_start": lines[loaded[-1]][0] if loaded else None,
        "progress_lines": len(progress),
    }


def encoded_pixels(cache: Path, vae_factor: int) -> dict:
    """What the cache holds: entries, pixels encoded (every ``latents*`` tensor, the flip included) and the buckets
    (latent size x the VAE's factor, as ``WxH``)."""
    from safetensors import safe_open

    files = sorted(cache.rglob("*.safetensors"))
    pixels, buckets = 0, Counter()
    for path in files:
        with safe_open(str(path), "pt") as fh:
            for key in fh.keys():  # noqa: SIM118 (safe_open is no dict: it has no __iter__)
                if key.startswith("latents"):
                    h, w = fh.get_slice(key).get_shape()[-2:]
                    pixels += h * w * vae_factor**2
                    if key == "latents":
                        buckets[f"{w * vae_factor}x{h * vae_factor}"] += 1
    return {"entries": len(files), "pixels_encoded": pixels, "buckets": dict(buckets.most_common())}


def vae_factor(model: Path) -> int:
    """The tiny DC-AE's spatial compression: one halving per encoder stage after the first."""
    config = json.loads((model / "vae" / "config.json").read_text())
    return 2 ** (len(config["encoder_block_out_channels"]) - 1)


def child_cpu_s(monitor: CpuMonitor, start: float, end: float) -> float | None:
    """CPU seconds the child used over the sampling interval that encloses [start, end]."""
    times = [x[0] for x in monitor.samples]
    i0 = max(bisect.bisect_right(times, start) - 1, 0)
    i1 = min(bisect.bisect_left(times, end), len(times) - 1)
    if i1 <= i0:
        return None
    return (monitor.samples[i1][2] - monitor.samples[i0][2]) / CLK_TCK


def run_checkout(
    name: str, checkout: Path, data: Path, work: Path, resolution: int, log, threads: int | None = None
) -> dict:
    """One fresh one-step run of ``checkout``'s code on ``data``: the caching phase's figures."""
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)
    env = dict(
        os.environ, PYTHONPATH=str(checkout), HF_HUB_OFFLINE="1", PYTHONUNBUFFERED="1", TOKENIZERS_PARALLELISM="false"
    )
    if threads:  # torch's intra-op threads (neither version sets them: OpenMP's default, one per core)
        env["OMP_NUM_THREADS"] = str(threads)
    load_before = Path("/proc/loadavg").read_text().split()[:3]
    code, lines, monitor, started = stamped_run(train_argv(work, data, resolution), env, work, work / "run.log")
    result: dict = {
        "name": name,
        "checkout": str(checkout),
        "resolution": resolution,
        "threads": threads,
        "returncode": code,
        "wall_s": round(lines[-1][0] - started, 2) if lines else None,
        "loadavg_before": load_before,
        "log": str(work / "run.log"),
    }
    if code != 0:
        result["error"] = "\n".join(text for _, text in lines[-15:])
        log(f"    {name}: FAILED (rc {code}); see {work / 'run.log'}")
        return result
    phase = caching_phase(lines)
    seconds = phase["end"] - phase["start"]
    cache = encoded_pixels(work / "cache", vae_factor(work / "tiny-sana"))
    foreign = monitor.foreign_cores(phase["start"], phase["end"])
    cpu = child_cpu_s(monitor, phase["start"], phase["end"])
    pre_cpu = None if phase["pre_start"] is None else child_cpu_s(monitor, phase["pre_start"], phase["start"])
    result.update(
        {
            "caching_s": round(seconds, 3),
            "images": phase["samples"],
            "images_per_s": round(phase["samples"] / seconds, 2),
            "pixels_encoded": cache["pixels_encoded"],
            "megapixels_encoded_per_s": round(cache["pixels_encoded"] / seconds / 1e6, 3),
            "pre_phase_s": None if phase["pre_start"] is None else round(phase["start"] - phase["pre_start"], 3),
            "pre_phase_cpu_s": None if pre_cpu is None else round(pre_cpu, 2),
            "to_cache_done_s": round(phase["end"] - started, 2),
            "progress_lines": phase["progress_lines"],
            "cache_entries": cache["entries"],
            "buckets_from_cache": cache["buckets"],
            "foreign_cores": None if foreign is None else round(foreign, 3),
            "caching_cpu_s": None if cpu is None else round(cpu, 2),
            "images_per_cpu_s": None if not cpu else round(phase["samples"] / cpu, 2),
            "megapixels_encoded_per_cpu_s": None if not cpu else round(cache["pixels_encoded"] / cpu / 1e6, 3),
            "bucket_table": bucket_table(lines),
        }
    )
    log(
        f"    {name} @ {resolution} px: caching {seconds:.2f} s, {result['images_per_s']} images/s, "
        f"{result['megapixels_encoded_per_s']} Mpx encoded/s; CPU {result['caching_cpu_s']} s "
        f"({result['images_per_cpu_s']} images/CPU s); other processes {result['foreign_cores']} cores"
    )
    return result


def bucket_table(lines: list[tuple[float, str]]) -> list[str]:
    """The bucket table the run logged (after), from its heading to the crop line; [] when it logs none (before)."""
    texts = [text for _, text in lines]
    head = next((i for i, t in enumerate(texts) if t.startswith("images per bucket")), None)
    if head is None:
        return []
    table = [texts[head]]
    for text in texts[head + 1 :]:
        if not (text.startswith("  ") or "lose more than" in text):
            break
        table.append(text)
    return table


# --------------------------------------------------------------------------------------------
# crop shares, check-data
# --------------------------------------------------------------------------------------------
def kept_shares(plan: list[dict], resolution: int, stride: int | None) -> dict:
    """The share of each image's area that survives the crop: a square (before) and its nearest aspect bucket (after,
    ``dit_lora.data.aspect`` of this checkout, the run's own choice), as mean, minimum and images losing > 10%."""
    from dit_lora.data.aspect import aspect_buckets, nearest_bucket

    def kept(width: int, height: int, bw: int, bh: int) -> float:
        image, bucket = width / height, bw / bh
        return min(image / bucket, bucket / image)

    square = [kept(e["width"], e["height"], 1, 1) for e in plan]
    out = {"square": square}
    if stride is not None:
        buckets = aspect_buckets(resolution * resolution, stride)
        out["buckets"] = [
            kept(e["width"], e["height"], *nearest_bucket(e["height"], e["width"], buckets)[::-1]) for e in plan
        ]
    return {
        name: {
            "mean_kept": round(statistics.fmean(v), 4),
            "min_kept": round(min(v), 4),
            "images_losing_over_10pct": sum(k < 0.9 for k in v),
        }
        for name, v in out.items()
    }


def check_data(work: Path, data: Path, resolution: int, log) -> dict:
    """``python -m dit_lora check-data`` of this checkout on the data set with the after run's model, options and
    cache: its summary lines (from the ``N sample(s):`` line on) and the table's header."""
    argv = [
        sys.executable,
        "-m",
        "dit_lora",
        "check-data",
        "--family",
        "sana",
        "--pretrained_model_name_or_path",
        str(work / "tiny-sana"),
        "--train_data_dir",
        str(data),
        "--resolution",
        str(resolution),
        "--center_crop",
        "true",
        "--random_flip",
        "true",
        "--cache_dir",
        str(work / "cache"),
    ]
    env = dict(os.environ, PYTHONPATH=str(REPO), HF_HUB_OFFLINE="1", PYTHONUNBUFFERED="1")
    started = time.perf_counter()
    proc = subprocess.run(argv, capture_output=True, text=True, env=env, cwd=str(work))
    lines = proc.stdout.splitlines()
    start = next((i for i, t in enumerate(lines) if re.match(r"\d+ sample\(s\):", t)), len(lines))
    summary = [t for t in lines if t.startswith(("checking ", "cache: "))] + lines[start:]
    log(f"    check-data: rc {proc.returncode}, {time.perf_counter() - started:.1f} s")
    return {
        "command": " ".join(["python -m dit_lora check-data"] + argv[4:]),
        "returncode": proc.returncode,
        "wall_s": round(time.perf_counter() - started, 2),
        "summary": summary,
        "warning_rows": sum(t.startswith("WARN") for t in lines),
        "stderr_tail": proc.stderr[-1500:],
    }


# --------------------------------------------------------------------------------------------
# the benchmark
# --------------------------------------------------------------------------------------------
def spread(rows: list[dict], key: str) -> dict:
    """Median, min, max and (max - min) / median of ``key`` over the successful rows."""
    values = [r[key] for r in rows if r.get("returncode") == 0 and key in r]
    if not values:
        return {}
    med = statistics.median(values)
    return {
        "median": round(med, 3),
        "min": min(values),
        "max": max(values),
        "spread_pct": round(100 * (max(values) - min(values)) / med, 1) if med else None,
        "n": len(values),
    }


def summarise(rows: list[dict], resolutions: list[int]) -> dict:
    """Per resolution and checkout: the spread of the rates and times; after over before."""
    out: dict = {}
    for res in resolutions:
        per = {}
        for name in ("before", "after"):
            mine = [r for r in rows if r["name"] == name and r["resolution"] == res]
            if mine:
                per[name] = {
                    k: spread(mine, k)
                    for k in (
                        "images_per_s",
                        "megapixels_encoded_per_s",
                        "caching_s",
                        "caching_cpu_s",
                        "images_per_cpu_s",
                        "megapixels_encoded_per_cpu_s",
                        "pre_phase_s",
                        "pre_phase_cpu_s",
                        "foreign_cores",
                    )
                }
        if "before" in per and "after" in per and per["before"]["images_per_s"] and per["after"]["images_per_s"]:
            per["after_over_before"] = {
                k: round(per["after"][k]["median"] / per["before"][k]["median"], 3)
                for k in (
                    "images_per_s",
                    "megapixels_encoded_per_s",
                    "images_per_cpu_s",
                    "megapixels_encoded_per_cpu_s",
                )
                if per["after"][k] and per["before"][k]
            }
        out[str(res)] = per
    return out


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--before", type=Path, help="a checkout of the 'before' commit (e.g. 78824c8); omitted: after only")
    p.add_argument("--images", type=int, default=1000)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--resolutions", default="64", help="comma-separated --resolution values (64: the demo's)")
    p.add_argument("--repeats", type=int, default=2, help="rounds of before, after (back to back)")
    p.add_argument("--threads", type=int, help="OMP_NUM_THREADS of the runs (default: unset, one per core)")
    p.add_argument("--work_dir", type=Path, default=Path(tempfile.gettempdir()) / "dit-lora-bench-caching")
    p.add_argument("--out", type=Path, help="results JSON (e.g. benchmarks/data/caching_cpu.json)")
    p.add_argument(
        "--smoke", action="store_true", help="20 images, after only, one round, one thread: check the measuring"
    )
    args = p.parse_args(argv)
    if args.smoke:
        args.images, args.repeats, args.before, args.resolutions, args.threads = 20, 1, None, "64", 1
        args.work_dir = Path(tempfile.mkdtemp(prefix="dit-lora-caching-smoke-"))
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    try:
        return measure(args)
    finally:
        if args.smoke:  # its own temporary folder, also when the run failed
            shutil.rmtree(args.work_dir, ignore_errors=True)


def measure(args: argparse.Namespace) -> int:
    """The rounds, the bucket table's checks and the results file (the module docstring)."""
    log = lambda m: print(m, flush=True)  # noqa: E731
    resolutions = [int(r) for r in args.resolutions.split(",")]
    data = args.work_dir / f"images{args.images}_seed{args.seed}"
    dataset = make_dataset(data, args.images, args.seed, log)
    plan = image_plan(args.images, args.seed)
    checkouts = ([("before", args.before.resolve())] if args.before else []) + [("after", REPO)]
    rows, extra = [], {}
    for res in resolutions:
        for round_ in range(args.repeats):
            log(f"round {round_ + 1}/{args.repeats} at --resolution {res}")
            for name, checkout in checkouts:
                row = run_checkout(name, checkout, data, args.work_dir / f"{name}_{res}", res, log, args.threads)
                rows.append({**row, "round": round_ + 1})
        after = [r for r in rows if r["name"] == "after" and r["resolution"] == res and r["returncode"] == 0]
        if after:
            steps = re.search(r"in steps of (\d+)", after[-1]["bucket_table"][0]) if after[-1]["bucket_table"] else None
            extra[str(res)] = {"kept_area": kept_shares(plan, res, int(steps.group(1)) if steps else None)}
            if not args.smoke:  # a second fresh process: the smoke run stays within its few seconds without it
                extra[str(res)]["check_data"] = check_data(args.work_dir / f"after_{res}", data, res, log)
    results = {
        "benchmark": "caching_cpu",
        "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
        "argv": sys.argv[1:],
        "machine": None if args.smoke else machine_environment(dict(os.environ)),
        "dataset": dataset,
        "options": DEMO_OPTIONS,
        "summary": summarise(rows, resolutions),
        "per_resolution": extra,
        "runs": rows,
    }
    if args.out:
        args.out.write_text(json.dumps(results, indent=1) + "\n")
        log(f"wrote {args.out}")
    log(json.dumps(results["summary"], indent=1))
    if args.smoke:
        return smoke_check(results)
    return 0 if all(r["returncode"] == 0 for r in rows) else 1


def smoke_check(results: dict) -> int:
    """The figures a real run reports exist and agree with each other."""
    (row,) = results["runs"]
    assert row["returncode"] == 0, row.get("error")
    assert row["images"] == row["cache_entries"] == 20, row
    assert sum(row["buckets_from_cache"].values()) == 20 and row["images_per_s"] > 0
    assert row["bucket_table"] and row["bucket_table"][0].startswith("images per bucket"), row["bucket_table"]
    # the table the run logged counts what the cache holds
    logged = {t.split()[0]: int(t.split()[1]) for t in row["bucket_table"][2:] if t.startswith("  ")}
    assert logged == row["buckets_from_cache"], (logged, row["buckets_from_cache"])
    assert results["per_resolution"]["64"]["kept_area"]["buckets"]["mean_kept"] > 0.8
    print("smoke test passed", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
