"""dit_lora.core.progress: a bar that fits the terminal and that messages never break; plain lines without a terminal."""

from __future__ import annotations

import fcntl
import os
import pty
import re
import struct
import subprocess
import sys
import termios

import pytest

from dit_lora.core import progress

_BAR_SCRIPT = """
import time
from dit_lora.core.progress import Progress, say
bar = Progress(40, desc="step", unit="step")
for i in range(40):
    time.sleep(0.002)
    bar.update(1)
    bar.set_postfix({"loss": "0.2130", "lr": "1.00e-04", "grad_norm": "0.798", "skipped": 3, "rollbacks": 1})
    if i == 20:
        say("saved /some/long/output/folder/checkpoint-20")
bar.close()
say("adapter written")
"""


def _screen(columns: int) -> list[str]:
    """Run a bar in a pseudo-terminal of ``columns`` columns; the lines as a terminal shows them (``\\r`` returns
    to the line's start, so only what follows the last one stays)."""
    leader, follower = pty.openpty()
    fcntl.ioctl(follower, termios.TIOCSWINSZ, struct.pack("HHHH", 40, columns, 0, 0))
    proc = subprocess.Popen([sys.executable, "-c", _BAR_SCRIPT], stdin=follower, stdout=follower, stderr=follower,
                            env={**os.environ, "COLUMNS": str(columns)})
    os.close(follower)
    chunks = []
    while True:
        try:
            chunk = os.read(leader, 65536)
        except OSError:  # the child closed its side
            break
        if not chunk:
            break
        chunks.append(chunk)
    assert proc.wait(timeout=60) == 0
    text = re.sub(r"\x1b\[[0-9;]*[A-Za-z]", "", b"".join(chunks).decode())
    return [line.split("\r")[-1] if line.split("\r")[-1] else line for line in text.replace("\r\n", "\n").split("\n")]


@pytest.mark.parametrize("columns", [80, 160])
def test_the_bar_fits_the_terminal_and_a_message_gets_its_own_line(columns):
    raw = _screen(columns)
    # Every redraw of the bar (the pieces between carriage returns) fits the terminal's width.
    pieces = [piece for line in raw for piece in line.split("\r")]
    assert max(len(piece) for piece in pieces) <= columns
    shown = [line.split("\r")[-1].strip() for line in raw]
    assert "saved /some/long/output/folder/checkpoint-20" in shown  # alone on its line, not glued to the bar
    assert "adapter written" in shown
    final = [line for line in shown if line.startswith("step 40/40")]
    assert final and "100%" in final[-1] and "<" in final[-1]  # count, elapsed<remaining: the ETA


def test_without_a_terminal_plain_lines_first_and_every_tenth_with_rate_postfix_and_eta(capsys):
    bar = progress.Progress(20, desc="step", unit="step", bar=False)
    for _ in range(20):
        bar.update(1)
        bar.set_postfix({"loss": "0.2130"})
    bar.close()
    lines = capsys.readouterr().out.splitlines()
    # the first update (the phase has started: its first rate and ETA), then every tenth
    assert len(lines) == 11 and lines[0].startswith("step 1/20, ") and lines[1].startswith("step 2/20, ")
    assert "loss 0.2130" in lines[-1]
    assert all("ETA " in line for line in lines[:-1]) and "took " in lines[-1]
    assert all(re.search(r"(steps/s|s/step)", line) for line in lines)


def test_a_disabled_progress_prints_nothing_and_say_prints_plainly(capsys):
    bar = progress.Progress(5, desc="caching", unit="sample", enabled=False)
    bar.update(5)
    progress.say("hello")
    assert capsys.readouterr().out == "hello\n"


def test_rate_text_reads_as_items_per_second_or_seconds_per_item():
    assert progress.rate_text(100, 2.0, "sample") == "50.0 samples/s"
    assert progress.rate_text(2, 3.8, "step") == "1.90 s/step"
    assert progress.rate_text(0, 1.0, "step") == "? s/step"
