"""Run a training script as ``__main__`` and timestamp every update of its tqdm step bar.

    python benchmarks/common/step_timer.py LOG.json SCRIPT.py [script args...]

Used by ``sana/vs_example_cpu.py`` on dit-lora's recipe and diffusers' example alike, so both are
timed by the same probe: ``tqdm.auto.tqdm`` is replaced (before the script is imported) by a
subclass whose ``update()`` records ``time.perf_counter()`` and the process's resident set size
(``/proc/self/statm``). Both trainers call ``progress.update(1)`` once per optimizer update, right
after ``optimizer.step()``, so consecutive timestamps bracket exactly one training step (data
loading, forward, backward, clipping, optimizer, logging included); model loading and latent
caching happen before the first stamp. Neither script is modified. At exit the stamps of every
bar that was updated are written to LOG.json.

``STEP_TIMER_TIME_CALLS=diffusers:SanaPipeline.encode_prompt`` also records the (start, end) of
every call to that method, so the benchmark can say how much of a step was text encoding.
"""

from __future__ import annotations

import atexit
import json
import os
import runpy
import sys
import time

_BARS: list = []
_CALLS: dict[str, list] = {}
_PAGE = os.sysconf("SC_PAGE_SIZE")


def _rss_bytes() -> int:
    try:
        with open("/proc/self/statm") as fh:
            return int(fh.read().split()[1]) * _PAGE
    except OSError:
        return -1


def _install() -> None:
    import tqdm.auto

    base = tqdm.auto.tqdm

    class TimedTqdm(base):  # type: ignore[misc, valid-type]
        def __init__(self, *args, **kwargs):
            super().__init__(*args, **kwargs)
            self._bench = {"desc": kwargs.get("desc") or getattr(self, "desc", ""), "total": self.total,
                           "created": time.perf_counter(), "stamps": [], "rss": []}
            _BARS.append(self._bench)

        def update(self, n=1):
            self._bench["stamps"].append(time.perf_counter())
            self._bench["rss"].append(_rss_bytes())
            return super().update(n)

    tqdm.auto.tqdm = TimedTqdm


def _time_calls(specs: list[str]) -> None:
    """Record (start, end) of every call to ``module:Class.method`` (e.g. ``diffusers:SanaPipeline.encode_prompt``)."""
    import functools
    import importlib

    for spec in specs:
        module_name, qualname = spec.split(":", 1)
        owner = importlib.import_module(module_name)
        *path, attr = qualname.split(".")
        for part in path:
            owner = getattr(owner, part)
        original = getattr(owner, attr)
        spans = _CALLS.setdefault(spec, [])

        def timed(*args, __original=original, __spans=spans, **kwargs):
            start = time.perf_counter()
            try:
                return __original(*args, **kwargs)
            finally:
                __spans.append((start, time.perf_counter()))

        setattr(owner, attr, functools.wraps(original)(timed))


def main() -> None:
    if len(sys.argv) < 3:
        raise SystemExit("usage: step_timer.py LOG.json SCRIPT.py [args...]")
    log_path, script = sys.argv[1], os.path.abspath(sys.argv[2])
    t0 = time.perf_counter()

    def dump() -> None:
        bars = [b for b in _BARS if b["stamps"]]
        with open(log_path, "w") as fh:
            json.dump({"script": script, "process_start": t0, "exit": time.perf_counter(), "bars": bars,
                       "calls": _CALLS}, fh)

    atexit.register(dump)
    _install()
    calls = [c for c in os.environ.get("STEP_TIMER_TIME_CALLS", "").split(",") if c]
    if calls:
        _time_calls(calls)
    sys.argv = [script] + sys.argv[3:]
    sys.path[0] = os.path.dirname(script)  # what `python SCRIPT.py` would have
    runpy.run_path(script, run_name="__main__")


if __name__ == "__main__":
    main()
