"""Progress of the long phases (caching, training steps) and the one print that knows whether a bar is open.

On a terminal (stdout and stderr both TTYs) a phase shows a tqdm bar that fits the terminal's width as it is now
(``dynamic_ncols``; count, ETA and rate first, the bar takes what is left). Without one (CI, ``nohup``, a SLURM
log) a bar would write hundreds of carriage-return updates into the file, so the phase prints a plain line instead
after the first item (the phase has started: its first rate and ETA), then every 10% of the work or every 30 s,
whichever comes first, and at the end:
``caching 400/1000 samples, 35.2 samples/s, ETA 0:17`` / ``step 120/1000, 1.90 s/step, loss 0.2130, ETA 27:51``.

:func:`say` prints a message line. While a bar is open it prints through ``tqdm.write``, which clears the bar,
writes the line and redraws the bar below it; a plain ``print`` would land on the bar's line.
"""

from __future__ import annotations

import sys
import time
from typing import Any

from tqdm import tqdm

LINE_EVERY_S = 30.0  # without a terminal: at least one line this often ...
LINE_EVERY_FRACTION = 0.1  # ... and one per tenth of the work
BAR_FORMAT = "{desc} {n_fmt}/{total_fmt} {percentage:3.0f}%|{bar}| {elapsed}<{remaining}, {rate_fmt}{postfix}"

_open_bars: list[Progress] = []  # the bars drawn now (a phase without a terminal draws none)


def on_terminal() -> bool:
    """True when a bar can be drawn: both stdout (the messages) and stderr (the bar) are terminals."""
    return all(getattr(stream, "isatty", lambda: False)() for stream in (sys.stdout, sys.stderr))


def say(message: str) -> None:
    """Print ``message`` (and flush); above the open bar, if one is drawn, so neither breaks the other."""
    if _open_bars:
        tqdm.write(message, file=sys.stdout)
        sys.stdout.flush()
    else:
        print(message, flush=True)


def rate_text(done: int, seconds: float, unit: str) -> str:
    """``35.2 samples/s`` when more than one per second, else ``1.90 s/step``; ``? s/unit`` before any is done."""
    if done <= 0 or seconds <= 0:
        return f"? s/{unit}"
    per_second = done / seconds
    return f"{per_second:.1f} {unit}s/s" if per_second >= 1 else f"{seconds / done:.2f} s/{unit}"


class Progress:
    """One phase's progress: a bar on a terminal, plain periodic lines without one, nothing when not ``enabled``
    (the processes other than the main one). ``update``, ``set_postfix`` and ``close`` as tqdm's; ``close`` is
    idempotent. ``desc`` starts the plain lines ("caching", "step"); ``unit`` names one item."""

    def __init__(
        self, total: int, *, desc: str, unit: str, initial: int = 0, enabled: bool = True, bar: bool | None = None
    ) -> None:
        self.total, self.desc, self.unit, self.n = total, desc, unit, initial
        self.initial, self.enabled, self.closed = initial, enabled, False
        self.postfix: dict[str, Any] = {}
        self.started = self.last_line = time.monotonic()
        self.last_fraction_step = self._fraction_step(initial)
        self.bar = None
        if enabled and (on_terminal() if bar is None else bar):
            self.bar = tqdm(
                total=total,
                initial=initial,
                desc=desc,
                unit=unit,
                dynamic_ncols=True,
                bar_format=BAR_FORMAT,
                file=sys.stderr,
                leave=True,
            )
            _open_bars.append(self)

    def _fraction_step(self, n: int) -> int:
        return int(n / max(1, self.total) / LINE_EVERY_FRACTION + 1e-9)

    def update(self, n: int = 1) -> None:
        """``n`` more items done: the bar moves, or a plain line after the first, and when a tenth of the work or
        30 s have passed."""
        first = self.n == self.initial
        self.n += n
        if self.bar is not None:
            self.bar.update(n)
        elif self.enabled and not self.closed:
            fraction_step = self._fraction_step(self.n)
            if (
                first
                or fraction_step != self.last_fraction_step
                or self.n >= self.total
                or time.monotonic() - self.last_line >= LINE_EVERY_S
            ):
                self.last_fraction_step, self.last_line = fraction_step, time.monotonic()
                print(self.line(), flush=True)

    def set_postfix(self, values: dict[str, Any]) -> None:
        """Values shown after the rate (e.g. the last check window's loss): host numbers the caller already has."""
        self.postfix = dict(values)
        if self.bar is not None:
            self.bar.set_postfix(self.postfix, refresh=True)

    def line(self) -> str:
        """The plain progress line: count, rate, the postfix values, ETA."""
        done, seconds = self.n - self.initial, time.monotonic() - self.started
        parts = [
            f"{self.desc} {self.n}/{self.total}" + (f" {self.unit}s" if self.desc != self.unit else ""),
            rate_text(done, seconds, self.unit),
        ]
        parts += [f"{k} {v}" for k, v in self.postfix.items()]
        left = self.total - self.n
        if done > 0 and left > 0:
            parts.append(f"ETA {tqdm.format_interval(seconds / done * left)}")
        elif left <= 0:
            parts.append(f"took {tqdm.format_interval(seconds)}")
        return ", ".join(parts)

    def close(self) -> None:
        """End the bar (its last state stays on screen); later messages print plainly again."""
        self.closed = True
        if self.bar is not None:
            self.bar.close()
            _open_bars.remove(self)
            self.bar = None

    def __enter__(self) -> Progress:
        return self

    def __exit__(self, *exc) -> None:
        self.close()


__all__ = ["BAR_FORMAT", "Progress", "on_terminal", "rate_text", "say"]
