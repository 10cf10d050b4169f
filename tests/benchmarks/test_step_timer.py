"""The CPU benchmarks' step probe (``benchmarks/common/step_timer.py`` through ``cpu_harness.run_once``) times both
kinds of trainer: dit-lora's ``Progress`` (plain lines when the output is a file, as in the benchmarks, or a bar)
and a diffusers example's ``tqdm.auto`` bar; and the children import this checkout's ``dit_lora``.

Each test runs a tiny fake trainer (a few sleeps, no model) in a child process, so it takes about a second.
"""

from __future__ import annotations

import importlib.util
import json
import os
import textwrap

import pytest

from helpers import ROOT

STEPS, WARMUP, SLEEP_S = 5, 1, 0.02


def _harness():
    """``benchmarks/common/cpu_harness.py``, loaded from its file (``benchmarks`` is no installed package)."""
    spec = importlib.util.spec_from_file_location("cpu_harness", ROOT / "benchmarks" / "common" / "cpu_harness.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


# A trainer drawing its steps through dit-lora's Progress: a caching phase first, then one update per step.
DIT_LORA_TRAINER = """
    import json, sys, time
    from pathlib import Path
    import dit_lora
    from dit_lora.core.progress import Progress

    out = Path(sys.argv[sys.argv.index("--output_dir") + 1])
    out.mkdir(parents=True, exist_ok=True)
    (out / "imported.json").write_text(json.dumps({"dit_lora": dit_lora.__file__}))
    with Progress(3, desc="caching", unit="sample") as caching:
        for _ in range(3):
            caching.update(1)
    progress = Progress(STEPS, desc="step", unit="step", bar=BAR)
    for _ in range(STEPS):
        time.sleep(SLEEP_S)
        progress.update(1)
    progress.close()
"""

# A trainer as diffusers' examples are written: a tqdm.auto bar named "Steps".
DIFFUSERS_TRAINER = """
    import time
    from tqdm.auto import tqdm

    bar = tqdm(range(STEPS), desc="Steps")
    for _ in range(STEPS):
        time.sleep(SLEEP_S)
        bar.update(1)
    bar.close()
"""


def _run(tmp_path, code: str, **names) -> dict:
    script = tmp_path / "train.py"
    values = {"STEPS": STEPS, "SLEEP_S": SLEEP_S, **names}
    script.write_text("\n".join(f"{k} = {v!r}" for k, v in values.items()) + "\n" + textwrap.dedent(code))
    harness, messages = _harness(), []
    result = harness.run_once("fake", [str(script), "--output_dir", str(tmp_path / "out")], harness.child_environment(),
                              tmp_path / "logs", WARMUP, STEPS, {}, 99.0, messages.append)
    assert "error" not in result, (result["error"], (tmp_path / "logs" / "fake.log").read_text())
    return result


def _check_times(result: dict) -> None:
    assert result["timed_steps"] == STEPS - WARMUP
    assert len(result["step_s"]) == STEPS - WARMUP
    assert all(SLEEP_S * 0.9 <= t < 5.0 for t in result["step_s"]), result["step_s"]
    assert result["median_s_per_step"] >= SLEEP_S * 0.9


@pytest.mark.parametrize("bar", [None, True], ids=["plain-lines", "terminal-bar"])
def test_dit_lora_progress_is_timed(tmp_path, bar):
    """Without a terminal (the benchmarks' log file) Progress draws no bar at all, only lines: its updates are
    still stamped, once each (with a bar, the tqdm inside it adds no second record)."""
    result = _run(tmp_path, DIT_LORA_TRAINER, BAR=bar)
    _check_times(result)
    stamps = json.loads((tmp_path / "logs" / "fake.steps.json").read_text())["bars"]
    assert [(b["desc"], b["source"], len(b["stamps"])) for b in stamps] == [("caching", "dit_lora", 3),
                                                                           ("step", "dit_lora", STEPS)]


def test_diffusers_example_bar_is_timed(tmp_path):
    _check_times(_run(tmp_path, DIFFUSERS_TRAINER))


def test_children_import_this_checkout(tmp_path, monkeypatch):
    """The parent's PYTHONPATH is kept and this repository comes first, so a worktree's benchmark times the
    worktree's code, not the code an editable install points at."""
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(["/elsewhere", str(ROOT)]))
    env = _harness().child_environment(EXTRA="1")
    assert env["PYTHONPATH"].split(os.pathsep) == [str(ROOT), "/elsewhere"]
    assert (env["HF_HUB_OFFLINE"], env["EXTRA"]) == ("1", "1")
    monkeypatch.delenv("PYTHONPATH")
    _run(tmp_path, DIT_LORA_TRAINER, BAR=None)
    imported = json.loads((tmp_path / "out" / "imported.json").read_text())["dit_lora"]
    assert imported == str(ROOT / "dit_lora" / "__init__.py")


def test_step_bar_picks_the_step_progress_of_the_run():
    step_bar = _harness().step_bar
    bars = [{"desc": "caching", "total": 4, "stamps": [1]}, {"desc": "Steps", "total": 9, "stamps": [1]},
            {"desc": "step", "total": 4, "stamps": [1]}]
    assert step_bar(bars, 4) is bars[2]
    assert step_bar(bars, 9) is bars[1]
    assert step_bar(bars, 5) is None
