"""Run a command and follow its resident memory: the peak (``VmHWM``) and current RSS at marked log lines.

``watch(cmd, marks)`` starts ``cmd`` (stdout and stderr merged), reads its output line by line and, whenever a
line starts with one of ``marks`` (e.g. ``"training:"``), records the child's ``VmHWM`` (peak resident set so
far, what ``ru_maxrss`` reports at exit) and ``VmRSS`` from ``/proc/<pid>/status``; a thread samples ``VmRSS``
every ``period`` seconds in between, so the largest RSS between two marks is known to within one period.
Nothing in the child is changed (its own ``ru_maxrss`` stays the figure it reports).

``follow`` watches another process than the one started: a launcher's child (``rank_zero`` finds the process of
a ``dit-lora launch`` whose environment says ``RANK=0``); until it exists the started process is sampled.
"""

from __future__ import annotations

import os
import subprocess
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path


def _status(pid: int) -> dict[str, int]:
    """``VmHWM`` and ``VmRSS`` of ``pid`` in bytes (empty when the process is gone)."""
    out = {}
    try:
        with open(f"/proc/{pid}/status") as fh:
            for line in fh:
                if line.startswith(("VmHWM:", "VmRSS:")):
                    key, value = line.split(":", 1)
                    out[key] = int(value.split()[0]) * 1024
    except OSError:
        pass
    return out


def _children(pid: int) -> list[int]:
    try:
        with open(f"/proc/{pid}/task/{pid}/children") as fh:
            return [int(c) for c in fh.read().split()]
    except OSError:
        return []


def rank_zero(root: int) -> int | None:
    """The descendant of ``root`` whose environment holds ``RANK=0`` (a launched training process), or None."""
    todo = _children(root)
    while todo:
        pid = todo.pop(0)
        try:
            environ = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
        except OSError:
            continue
        if b"RANK=0" in environ:
            return pid
        todo.extend(_children(pid))
    return None


@dataclass
class Watched:
    returncode: int
    output: str
    wall_s: float
    ru_maxrss_bytes: int  # the child's peak RSS over its whole life (os.wait4)
    marks: list[dict] = field(default_factory=list)  # {"mark", "t", "hwm", "rss", "rss_max_since_last"}
    rss_max_after_last_mark: int = 0


def watch(cmd: list[str], marks: tuple[str, ...], *, env: dict | None = None, cwd=None, timeout: float = 600,
          period: float = 0.02, echo=None, follow: Callable[[int], int | None] | None = None) -> Watched:
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env, cwd=cwd,
                            bufsize=1)
    started = time.perf_counter()
    window = {"max": 0}
    done = threading.Event()
    target = {"pid": proc.pid, "found": follow is None}

    def watched_pid() -> int:
        if not target["found"] and follow is not None:
            found = follow(proc.pid)
            if found is not None:
                target.update(pid=found, found=True)
        return int(target["pid"])

    def sample() -> None:
        while not done.is_set():
            rss = _status(watched_pid()).get("VmRSS", 0)
            window["max"] = max(window["max"], rss)
            done.wait(period)

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    lines, found = [], []
    killer = threading.Timer(timeout, proc.kill)
    killer.start()
    try:
        for line in proc.stdout:  # type: ignore[union-attr]
            lines.append(line)
            if echo is not None:
                echo(line.rstrip("\n"))
            stripped = line.lstrip()
            for mark in marks:
                if stripped.startswith(mark):
                    status = _status(watched_pid())
                    found.append({"mark": mark, "t": round(time.perf_counter() - started, 2),
                                  "hwm": status.get("VmHWM", 0), "rss": status.get("VmRSS", 0),
                                  "rss_max_since_last": max(window["max"], status.get("VmRSS", 0))})
                    window["max"] = 0
                    break
        _, status_code, usage = os.wait4(proc.pid, 0)
        proc.returncode = os.waitstatus_to_exitcode(status_code)
    finally:
        killer.cancel()
        done.set()
        sampler.join()
    return Watched(returncode=proc.returncode, output="".join(lines), wall_s=round(time.perf_counter() - started, 2),
                   ru_maxrss_bytes=usage.ru_maxrss * 1024, marks=found, rss_max_after_last_mark=window["max"])


__all__ = ["Watched", "rank_zero", "watch"]
