"""What the CPU benchmarks share: machine description, other processes' load, and one timed child run.

``run_once`` starts a training script under ``step_timer.py`` (fresh child process), samples every 0.1 s how
much CPU other processes use, and returns per-step times (from the stamps of the trainer's step progress: a
diffusers example's tqdm bar, dit-lora's ``Progress``, bar or plain lines), which steps were
*clean* (other processes used < ``clean_cores`` around them), the child's peak RSS (``os.wait4``) and, where
the run wrote one, fields of its ``train_summary.json``. Used by the CPU benchmarks
(``sana/vs_example_cpu.py``, ``cogvideox/vs_example_cpu.py``, ``guard/overhead_cpu.py``, ``levers/compile_nf4_cpu.py``),
whose children get their environment from ``child_environment``.
"""

from __future__ import annotations

import importlib.metadata
import json
import os
import platform
import statistics
import subprocess
import sys
import threading
import time
from pathlib import Path

STEP_TIMER = Path(__file__).resolve().parent / "step_timer.py"
REPO = Path(__file__).resolve().parents[2]
CLK_TCK = os.sysconf("SC_CLK_TCK")
#: train_summary.json fields copied into a run's result
SUMMARY_KEYS = ("steps_per_second", "train_time_s", "peak_memory_bytes", "compile", "quantization", "memory_plan")
#: what the trainers call their step progress: diffusers' examples "Steps", dit-lora's loop "step"
STEP_BAR_NAMES = ("steps", "step")


def child_environment(**extra: str) -> dict:
    """The environment of the benchmark's child processes: this one's, offline, unbuffered, and ``PYTHONPATH``
    kept (a checkout run with it must time its own code, not an editable install's) with this repository
    first, so the children import the ``dit_lora`` this benchmark belongs to, as it does itself."""
    env = dict(os.environ, HF_HUB_OFFLINE="1", TOKENIZERS_PARALLELISM="false", PYTHONUNBUFFERED="1", **extra)
    kept = [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p and Path(p).resolve() != REPO]
    env["PYTHONPATH"] = os.pathsep.join([str(REPO)] + kept)
    return env


def step_bar(bars: list[dict], steps: int) -> dict | None:
    """The step progress of a run of ``steps`` updates among the stamped ``bars`` (a step_timer log's), or None."""
    found = [b for b in bars if str(b.get("desc", "")).strip().lower() in STEP_BAR_NAMES and b["total"] == steps]
    return found[0] if found else None

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
# one run
# --------------------------------------------------------------------------------------------
def run_once(name: str, script_argv: list[str], env: dict, logs: Path, warmup: int, steps: int,
             quiet: dict, clean_cores: float, log, python: str = sys.executable, time_call: str | None = None) -> dict:
    """One training run in a fresh child; ``steps`` optimizer updates of which the first ``warmup`` are not timed
    (their times are kept as ``warmup_step_s``: step 1 measured from the bar's creation). ``time_call``: a
    ``STEP_TIMER_TIME_CALLS`` spec whose time inside each timed step is reported as ``step_text_encoding_s``."""
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
    bar = step_bar(data["bars"], steps)
    if bar is None or len(bar["stamps"]) < warmup + 3:
        seen = ", ".join(f"{b.get('desc')!r} ({b.get('source', 'tqdm.auto')}, total {b['total']}, "
                         f"{len(b['stamps'])} updates)" for b in data["bars"]) or "none"
        result["error"] = f"no step bar with {steps} updates found in {stamp_file} (stamped: {seen})"
        log(f"    FAILED: {result['error']}")
        return result
    stamps, rss = bar["stamps"], bar["rss"]
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
        # steps 1..warmup: compile (first compiled step), the kernel check (step 1), allocator warm-up
        "warmup_step_s": [round(x, 3) for x in
                          [stamps[0] - bar["created"]] + [b - a for a, b in zip(stamps[: max(warmup - 1, 0)], stamps[1:warmup])]],
    })
    if any(clean):
        result["clean_median_s_per_step"] = round(statistics.median(t for t, c in zip(timed, clean) if c), 5)
    spans = data.get("calls", {}).get(time_call) if time_call else None
    if spans is not None:
        # Time spent in SanaPipeline.encode_prompt inside each timed step.
        enc = [sum(max(0.0, min(e, b) - max(s, a)) for s, e in spans) for a, b in bounds]
        result["step_text_encoding_s"] = [round(x, 5) for x in enc]
    summary = Path(script_argv[script_argv.index("--output_dir") + 1]) / "train_summary.json"
    if summary.exists():  # dit-lora's own numbers, for cross-checking (its window includes the first steps)
        own = json.loads(summary.read_text())
        result["dit_lora_summary"] = {k: own.get(k) for k in SUMMARY_KEYS if k in own}
    log(f"    median {med:.4f} s/step over {len(timed)} steps, {sum(clean)} clean "
        f"(median {result.get('clean_median_s_per_step')}); other processes {result['foreign_cores']} cores; "
        f"peak RSS {result['peak_rss_bytes'] / 2**20:.0f} MiB; wall {wall:.1f} s")
    return result


