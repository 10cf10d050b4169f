#!/usr/bin/env python
"""CPU benchmark: dit-lora's Sana recipe vs diffusers' ``train_dreambooth_lora_sana.py`` on the same work.

    python benchmarks/bench_sana_cpu.py --diffusers_example /tmp/anchors/train_dreambooth_lora_sana.py \
        --out benchmarks/results_cpu.json

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
trainer's tqdm step bar (both trainers update it once per optimizer step), so model loading,
latent/text caching and saving are excluded for all programs alike; the first ``--warmup_steps``
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
import importlib.metadata
import json
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
BENCH = Path(__file__).resolve().parent
DEMO_CONFIG = REPO / "recipes" / "configs" / "sana" / "demo.yaml"
RECIPE = REPO / "recipes" / "sana_lora.py"
STEP_TIMER = BENCH / "common" / "step_timer.py"
CLK_TCK = os.sysconf("SC_CLK_TCK")

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
# machine state
# --------------------------------------------------------------------------------------------

def machine_environment(env: dict) -> dict:
    """CPU, thread count (as the children see it with ``env``), Python and library versions for a results file."""
    versions = {}
    for pkg in ("torch", "diffusers", "transformers", "peft", "accelerate", "datasets", "tqdm"):
        try:
            versions[pkg] = importlib.metadata.version(pkg)
        except importlib.metadata.PackageNotFoundError:
            versions[pkg] = None
    threads = subprocess.run([sys.executable, "-c", "import torch; print(torch.get_num_threads())"],
                             capture_output=True, text=True, env=env).stdout.strip()
    return {"cpu_model": cpu_model(), "cpu_cores": os.cpu_count(), "cpu_flags": cpu_flags(),
            "torch_threads": int(threads) if threads.isdigit() else None, "python": platform.python_version(),
            "platform": platform.platform(), "versions": versions}


def cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def cpu_flags() -> list[str]:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("flags"):
                wanted = ("avx2", "avx512f", "avx512_bf16", "avx512_vnni", "amx_bf16", "amx_tile")
                return [f for f in line.split(":", 1)[1].split() if f in wanted]
    except OSError:
        pass
    return []


def _busy_ticks() -> int:
    """Non-idle CPU ticks of the whole machine since boot (/proc/stat)."""
    fields = [int(x) for x in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]]
    user, nice, system, idle, iowait, irq, softirq, steal = (fields + [0] * 8)[:8]
    return user + nice + system + irq + softirq + steal


def _proc_ticks(pid: int | str) -> int:
    """utime + stime (+ waited-for children) of a process, in ticks; 0 once it is gone."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return 0
    parts = stat[stat.rfind(")") + 2 :].split()
    return sum(int(x) for x in parts[11:15])


class CpuMonitor(threading.Thread):
    """Samples machine-wide busy ticks and the child's ticks, to measure other processes' load."""

    def __init__(self, pid: int, period: float = 0.1):
        super().__init__(daemon=True)
        self.pid, self.period = pid, period
        self.samples: list[tuple[float, int, int, int]] = []
        self._halt = threading.Event()

    def sample(self) -> None:
        self.samples.append((time.perf_counter(), _busy_ticks(), _proc_ticks(self.pid), _proc_ticks("self")))

    def run(self) -> None:
        while not self._halt.is_set():
            self.sample()
            self._halt.wait(self.period)

    def stop(self) -> None:
        self._halt.set()
        self.join()

    def foreign_cores(self, start: float, end: float) -> float | None:
        """Average CPU cores used by processes other than the child and us over the sampling
        interval that encloses [start, end] (so a short step is judged by its surroundings)."""
        import bisect

        times = [x[0] for x in self.samples]
        i0 = max(bisect.bisect_right(times, start) - 1, 0)
        i1 = min(bisect.bisect_left(times, end), len(times) - 1)
        if i1 <= i0:
            return None
        (t0, b0, c0, s0), (t1, b1, c1, s1) = self.samples[i0], self.samples[i1]
        return max(0.0, ((b1 - b0) - (c1 - c0) - (s1 - s0)) / CLK_TCK / (t1 - t0))


def background_cores(seconds: float = 1.5) -> float:
    b0, s0, t0 = _busy_ticks(), _proc_ticks("self"), time.perf_counter()
    time.sleep(seconds)
    b1, s1, t1 = _busy_ticks(), _proc_ticks("self"), time.perf_counter()
    return max(0.0, ((b1 - b0) - (s1 - s0)) / CLK_TCK / (t1 - t0))


def wait_for_quiet(threshold: float, max_wait: float, log) -> dict:
    started = time.perf_counter()
    load = background_cores()
    while load > threshold and time.perf_counter() - started < max_wait:
        log(f"    waiting: other processes use {load:.2f} cores (> {threshold})")
        time.sleep(3.0)
        load = background_cores()
    return {"background_cores_before": round(load, 3), "waited_s": round(time.perf_counter() - started, 1),
            "loadavg_before": Path("/proc/loadavg").read_text().split()[:3]}


# --------------------------------------------------------------------------------------------
# assets
# --------------------------------------------------------------------------------------------
def build_assets(work: Path, sizes: dict[str, int], env: dict) -> None:
    """Random Sana pipelines and shapes data sets (a child process, so this one stays small)."""
    code = (
        "import sys; sys.path.insert(0, sys.argv[1])\n"
        "from dit_lora.demo.tiny_sana import build_tiny_sana_pipeline\n"
        "from dit_lora.demo.shapes import make_shapes_dataset\n"
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
def dit_lora_cmd(work: Path, size: str, res: int, steps: int, out: Path) -> list[str]:
    return [
        str(RECIPE), "--config", str(DEMO_CONFIG), "--skip_doctor",
        "--demo_size", size, "--pretrained_model_name_or_path", str(work / "models" / size),
        "--train_data_dir", str(work / "data" / f"shapes{res}"), "--demo_num_images", str(COMMON["num_images"]),
        "--resolution", str(res), "--train_batch_size", str(COMMON["batch"]),
        "--rank", str(COMMON["rank"]), "--lora_alpha", str(COMMON["lora_alpha"]),
        "--learning_rate", str(COMMON["learning_rate"]), "--lr_scheduler", COMMON["lr_scheduler"],
        "--lr_warmup_steps", str(COMMON["lr_warmup_steps"]), "--max_grad_norm", str(COMMON["max_grad_norm"]),
        "--weighting_scheme", COMMON["weighting_scheme"], "--max_sequence_length", str(COMMON["max_sequence_length"]),
        "--seed", str(COMMON["seed"]), "--mixed_precision", "bf16",
        # The example's default is no complex-human-instruction prefix; captions match that way.
        "--complex_human_instruction", "false",
        "--cache_dir", str(work / "cache"), "--output_dir", str(out), "--overwrite_output_dir",
        "--max_train_steps", str(steps), "--checkpointing_steps", "0", "--validation_prompt", "none",
        "--report_to", "none",
    ]


def diffusers_cmd(example: Path, work: Path, size: str, res: int, steps: int, out: Path) -> list[str]:
    return [
        str(example), "--pretrained_model_name_or_path", str(work / "models" / size),
        "--dataset_name", str(work / "data" / f"shapes{res}_imagefolder"), "--caption_column", "text",
        "--instance_prompt", UNUSED_PROMPT,
        "--output_dir", str(out), "--resolution", str(res), "--center_crop", "--random_flip",
        "--train_batch_size", str(COMMON["batch"]), "--max_train_steps", str(steps),
        "--rank", str(COMMON["rank"]), "--lora_alpha", str(COMMON["lora_alpha"]), "--lora_layers", COMMON["lora_layers"],
        "--learning_rate", str(COMMON["learning_rate"]), "--lr_scheduler", COMMON["lr_scheduler"],
        "--lr_warmup_steps", str(COMMON["lr_warmup_steps"]), "--max_grad_norm", str(COMMON["max_grad_norm"]),
        "--weighting_scheme", COMMON["weighting_scheme"], "--max_sequence_length", str(COMMON["max_sequence_length"]),
        "--seed", str(COMMON["seed"]), "--mixed_precision", "bf16", "--cache_latents",
        "--checkpointing_steps", str(10 * steps + 1000),  # never reached: no checkpoints
        # --report_to none is not accepted by accelerate; tensorboard is the example's default.
        "--report_to", "tensorboard",
    ]


# --------------------------------------------------------------------------------------------
# one run
# --------------------------------------------------------------------------------------------
def run_once(name: str, script_argv: list[str], env: dict, logs: Path, warmup: int, steps: int,
             quiet: dict, clean_cores: float, log, python: str = sys.executable) -> dict:
    logs.mkdir(parents=True, exist_ok=True)
    stamp_file = logs / f"{name}.steps.json"
    stamp_file.unlink(missing_ok=True)
    argv = [python, str(STEP_TIMER), str(stamp_file)] + script_argv
    started = time.perf_counter()
    with open(logs / f"{name}.log", "w") as fh:
        fh.write(" ".join(argv) + "\n\n")
        fh.flush()
        proc = subprocess.Popen(argv, stdout=fh, stderr=subprocess.STDOUT, env=env, cwd=str(REPO))
        monitor = CpuMonitor(proc.pid)
        monitor.start()
        _, status, usage = os.wait4(proc.pid, 0)
        proc.returncode = os.waitstatus_to_exitcode(status)
        monitor.stop()
    wall = time.perf_counter() - started
    result: dict = {"name": name, "returncode": proc.returncode, "wall_s": round(wall, 2),
                    "peak_rss_bytes": usage.ru_maxrss * 1024, "log": str(logs / f"{name}.log"), **quiet}
    if proc.returncode != 0 or not stamp_file.exists():
        tail = (logs / f"{name}.log").read_text().splitlines()[-15:]
        result["error"] = "\n".join(tail)
        log(f"    FAILED (rc {proc.returncode}); see {logs / (name + '.log')}")
        return result
    data = json.loads(stamp_file.read_text())
    bars = [b for b in data["bars"] if str(b.get("desc", "")).lower() == "steps" and b["total"] == steps]
    if not bars or len(bars[0]["stamps"]) < warmup + 3:
        result["error"] = f"no step bar with {steps} updates found in {stamp_file}"
        log(f"    FAILED: {result['error']}")
        return result
    stamps, rss = bars[0]["stamps"], bars[0]["rss"]
    # stamps[i] is the end of step i + 1, so step k (2..N) is stamps[k-1] - stamps[k-2]. Timed: steps warmup+1..N.
    first = max(warmup - 1, 0)
    bounds = list(zip(stamps[first:-1], stamps[first + 1 :]))
    timed = [b - a for a, b in bounds]
    foreign = [monitor.foreign_cores(a, b) for a, b in bounds]
    clean = [f is not None and f < clean_cores for f in foreign]
    window = (stamps[first], stamps[-1])
    med, mean = statistics.median(timed), (window[1] - window[0]) / len(timed)
    result.update({
        "steps": steps, "warmup_steps": warmup, "timed_steps": len(timed), "clean_steps": sum(clean),
        "median_s_per_step": round(med, 5), "mean_s_per_step": round(mean, 5), "min_s_per_step": round(min(timed), 5),
        "startup_s": round(stamps[0] - data["process_start"] - (timed[0] if timed else 0.0), 2),
        "train_rss_max_bytes": max(rss), "rss_at_first_step_bytes": rss[0],
        "foreign_cores": None if (fc := monitor.foreign_cores(*window)) is None else round(fc, 3),
        "step_s": [round(x, 5) for x in timed],
        "step_foreign_cores": [None if f is None else round(f, 3) for f in foreign],
        "step_clean": clean,
    })
    if any(clean):
        result["clean_median_s_per_step"] = round(statistics.median(t for t, c in zip(timed, clean) if c), 5)
    spans = data.get("calls", {}).get(ENCODE_CALL)
    if spans is not None:
        # Time spent in SanaPipeline.encode_prompt inside each timed step.
        enc = [sum(max(0.0, min(e, b) - max(s, a)) for s, e in spans) for a, b in bounds]
        result["step_text_encoding_s"] = [round(x, 5) for x in enc]
    summary = Path(script_argv[script_argv.index("--output_dir") + 1]) / "train_summary.json"
    if summary.exists():  # dit-lora's own numbers, for cross-checking (its window includes the first steps)
        own = json.loads(summary.read_text())
        result["dit_lora_summary"] = {k: own.get(k) for k in ("steps_per_second", "train_time_s", "peak_memory_bytes")}
    log(f"    median {med:.4f} s/step over {len(timed)} steps, {sum(clean)} clean "
        f"(median {result.get('clean_median_s_per_step')}); other processes {result['foreign_cores']} cores; "
        f"peak RSS {result['peak_rss_bytes'] / 2**20:.0f} MiB; wall {wall:.1f} s")
    return result


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
    configs = sorted({r["config"] for r in runs}, key=lambda c: c != "tiny")
    for config in configs:
        for label, variant, derived in (("dit-lora", "dit-lora", False), ("diffusers", "diffusers", False),
                                        (DERIVED, "diffusers", True)):
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
            }
            if variant == "diffusers" and enc_clean:
                row["text_encoding_median_s_per_step"] = round(statistics.median(enc_clean), 5)
            rows.append(row)
    base = {r["config"]: r for r in rows if r["trainer"] == "dit-lora" and r.get("ok_runs")}
    for r in rows:
        if r.get("ok_runs") and r["config"] in base:
            r["time_vs_dit_lora"] = round(r["median_s_per_step"] / base[r["config"]]["median_s_per_step"], 3)
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
        "start-up (s) | runs |",
        "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for r in rows:
        if not r.get("ok_runs"):
            lines.append(f"| {r['config']} | {r['trainer']} | failed | | | | | | | | | 0 |")
            continue
        derived = r["trainer"] == DERIVED
        flag = " (noisy)" if r["noisy"] else ""
        lines.append(
            f"| {r['config']} ({r['resolution']} px) | {r['trainer']} | {r['steps_per_s']:.2f}{flag} | "
            f"{r['median_s_per_step']:.4f} | {r['mean_s_per_step']:.4f} | {r['clean_steps']}/{r['timed_steps']} | "
            f"{r['median_s_per_step_all_steps']:.4f} | {r.get('time_vs_dit_lora', 1.0):.2f}x | "
            + ("(same runs) | | | " if derived else
               f"{r['peak_rss_mib']:.0f} | {r['train_rss_mib']:.0f} | {r['startup_s']:.1f} | ")
            + f"{r['ok_runs']} |"
        )
    return "\n".join(lines)


# --------------------------------------------------------------------------------------------
def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--diffusers_example", default=None, help="Path to diffusers' train_dreambooth_lora_sana.py (optional).")
    ap.add_argument("--example_python", default=None,
                    help="Python interpreter of an environment with torch, torchvision and diffusers to run the example "
                         "under (default: this one).")
    ap.add_argument("--out", default=str(BENCH / "results_cpu.json"), help="Where the JSON results go.")
    ap.add_argument("--markdown", default=None, help="Also write the summary table to this file.")
    ap.add_argument("--work_dir", default=os.path.join(tempfile.gettempdir(), "dit-lora-bench-cpu"),
                    help="Models, data, caches, run outputs and logs (reused between invocations).")
    ap.add_argument("--configs", default="tiny,small", help="Comma-separated subset of tiny,small.")
    ap.add_argument("--variants", default=",".join(VARIANTS), help=f"Comma-separated subset of {','.join(VARIANTS)}.")
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
    env = dict(os.environ, HF_HUB_OFFLINE="1", TOKENIZERS_PARALLELISM="false", PYTHONUNBUFFERED="1")
    env.pop("PYTHONPATH", None)

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
    for rnd in range(args.repeats):
        for config in configs:
            res, steps = sizes[config], steps_for[config]
            for variant in variants:
                name = f"{config}-{variant}-r{rnd}"
                out = work / "runs" / name
                if variant == "dit-lora":
                    script_argv, child_env = dit_lora_cmd(work, config, res, steps, out), env
                    python = sys.executable
                else:
                    script_argv = diffusers_cmd(example, work, config, res, steps, out)
                    child_env = diffusers_env
                    python = example_python
                shutil.rmtree(out, ignore_errors=True)
                log(f"[round {rnd + 1}/{args.repeats}] {config} ({res} px, {steps} steps) {variant}")
                quiet = wait_for_quiet(args.quiet_cores, args.max_wait_s, log)
                result = run_once(name, script_argv, child_env, work / "logs", args.warmup_steps, steps, quiet,
                                  args.clean_cores, log, python=python)
                result.update(config=config, variant=variant, resolution=res, round=rnd)
                runs.append(result)
                shutil.rmtree(out, ignore_errors=True)

    rows = summarize(runs, args.min_clean_steps)
    noisy = [f"{r['config']}/{r['trainer']}" for r in rows if r.get("noisy")]
    if noisy:
        notes.append(f"fewer than {args.min_clean_steps} clean steps for {', '.join(noisy)}: their numbers are the "
                     "median of all steps, inflated by other processes' load")
    results = {
        "benchmark": "bench_sana_cpu", "created": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        "total_time_s": round(time.perf_counter() - t_start, 1), "environment": environment,
        "settings": {**COMMON, "resolutions": {c: sizes[c] for c in configs}, "steps": {c: steps_for[c] for c in configs},
                     "warmup_steps": args.warmup_steps, "repeats": args.repeats, "variants": variants,
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
