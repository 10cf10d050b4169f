"""Run a training script as ``__main__`` and timestamp every update of its step progress.

    python benchmarks/common/step_timer.py LOG.json SCRIPT.py [script args...]

Used by the CPU benchmarks (``benchmarks/common/cpu_harness.py``) on dit-lora's recipes and diffusers' example
trainers alike, so both are timed by the same kind of probe, installed before the script is imported:

* diffusers' examples draw a ``tqdm.auto.tqdm`` bar: it is replaced by a subclass whose ``update()`` stamps;
* dit-lora draws its step progress through ``dit_lora.core.progress.Progress``, a tqdm bar on a terminal and
  plain lines without one (the benchmarks' children write to a log file: no bar at all). ``Progress.__init__``
  and ``Progress.update`` are wrapped when that module is first imported (a post-import hook on
  ``sys.meta_path``, so whichever copy of ``dit_lora`` the script imports is the one timed, and nothing is
  imported early), so the stamps come whatever the output is.

A stamp is ``time.perf_counter()`` and the process's resident set size (``/proc/self/statm``), taken on the host
when the trainer reports an update: nothing reads a device value. Both trainers report once per optimizer
update, right after ``optimizer.step()``, so consecutive stamps bracket exactly one training step (data loading,
forward, backward, clipping, optimizer, logging included); model loading and latent caching happen before the
first stamp. Neither script is modified. At exit the stamps of every progress that was updated are written to
LOG.json (``bars``: desc, total, created, stamps, rss, and ``source``: ``tqdm.auto`` or ``dit_lora``).

``STEP_TIMER_TIME_CALLS=diffusers:SanaPipeline.encode_prompt`` also records the (start, end) of
every call to that method, so the benchmark can say how much of a step was text encoding.
"""

from __future__ import annotations

import atexit
import importlib.abc
import json
import os
import runpy
import sys
import time

_BARS: list = []
_CALLS: dict[str, list] = {}
_PAGE = os.sysconf("SC_PAGE_SIZE")
#: dit-lora's progress module: its ``Progress`` draws the training steps (a bar on a terminal, lines without)
PROGRESS_MODULE = "dit_lora.core.progress"


def _rss_bytes() -> int:
    try:
        with open("/proc/self/statm") as fh:
            return int(fh.read().split()[1]) * _PAGE
    except OSError:
        return -1


def _new_bar(desc, total, source: str) -> dict:
    """The record of one progress (a bar or dit-lora's ``Progress``); stamped by :func:`_stamp`."""
    bar = {"desc": desc, "total": total, "source": source, "created": time.perf_counter(), "stamps": [], "rss": []}
    _BARS.append(bar)
    return bar


def _stamp(bar: dict) -> None:
    bar["stamps"].append(time.perf_counter())
    bar["rss"].append(_rss_bytes())


def _install() -> None:
    """Stamp the updates of ``tqdm.auto`` bars (diffusers' examples) and of dit-lora's ``Progress``."""
    import tqdm.auto

    base = tqdm.auto.tqdm

    class TimedTqdm(base):  # type: ignore[misc, valid-type]
        def __init__(self, *args, **kwargs):
            super().__init__(*args, **kwargs)
            self._bench = _new_bar(kwargs.get("desc") or getattr(self, "desc", ""), self.total, "tqdm.auto")

        def update(self, n=1):
            _stamp(self._bench)
            return super().update(n)

    tqdm.auto.tqdm = TimedTqdm
    if PROGRESS_MODULE in sys.modules:  # imported already (the timer run in-process, as by a test)
        time_progress(sys.modules[PROGRESS_MODULE])
    else:
        sys.meta_path.insert(0, _AfterImport(PROGRESS_MODULE, time_progress))


def time_progress(module) -> None:
    """Wrap ``module.Progress`` (``dit_lora.core.progress``) so each instance records its updates' stamps.

    Its own ``desc`` and ``total`` name the record ("step", the run's max steps), as a tqdm bar's do; the stamp is
    taken before the update prints, as :class:`TimedTqdm`'s is before the bar redraws."""
    cls = module.Progress
    if getattr(cls, "_step_timer", False):
        return
    original_init, original_update = cls.__init__, cls.update

    def __init__(self, *args, **kwargs):
        original_init(self, *args, **kwargs)
        self._bench = _new_bar(self.desc, self.total, "dit_lora")

    def update(self, n: int = 1) -> None:
        _stamp(self._bench)
        return original_update(self, n)

    cls.__init__, cls.update, cls._step_timer = __init__, update, True


class _AfterImport(importlib.abc.MetaPathFinder):
    """Calls ``patch(module)`` right after the module ``name`` is executed, wherever it is imported from: the
    finders after this one find it as usual and its loader's ``exec_module`` is wrapped."""

    def __init__(self, name: str, patch) -> None:
        self.name, self.patch = name, patch

    def find_spec(self, fullname, path, target=None):
        if fullname != self.name:
            return None
        for finder in sys.meta_path:
            if finder is self or not hasattr(finder, "find_spec"):
                continue
            spec = finder.find_spec(fullname, path, target)
            if spec is not None and spec.loader is not None:
                break
        else:
            return None
        sys.meta_path.remove(self)  # once is enough
        execute, patch = spec.loader.exec_module, self.patch

        def exec_module(module):
            execute(module)
            patch(module)

        spec.loader.exec_module = exec_module  # the loader instance is this module's alone
        return spec


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
