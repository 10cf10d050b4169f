"""What many tests share: the repository root, recipe runs in a subprocess or in process, run summaries.

A plain module (``pythonpath = ["tests/support"]`` in pyproject.toml), so every test imports the same copy:
``from helpers import ROOT, base_args, run_recipe``. Fixtures live in ``conftest.py``.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
RECIPE = ROOT / "recipes" / "sana_lora.py"

#: whether the running test carries ``@pytest.mark.slow`` (set by conftest before any fixture runs)
CURRENT = {"slow": True}


def base_args(model: Path, data: Path, out: Path, cache: Path, **overrides) -> list[str]:
    """Recipe flags for a short CPU run on the tiny model."""
    opts = {
        "pretrained_model_name_or_path": model, "train_data_dir": data, "output_dir": out, "cache_dir": cache,
        "resolution": 64, "center_crop": "true", "rank": 4, "lora_alpha": 8, "train_batch_size": 4,
        "max_train_steps": 6, "learning_rate": 1e-3, "checkpointing_steps": 0, "report_to": "none",
        "skip_doctor": "true", "seed": 0,
        # The memory plan traces the model at start (seconds per run on 2 cores); it and its gate have their own
        # tests (tests/plan/, the default-flag demo runs of tests/e2e/test_no_host_sync.py, the real layouts).
        "ignore_memory_plan": "true",
    }
    opts.update(overrides)
    args: list[str] = []
    for k, v in opts.items():
        if v is None:
            continue
        args += [f"--{k}", str(v)]
    return args


def run_recipe(args: list[str], *, env: dict | None = None, timeout: int = 300, launcher: list[str] | None = None,
               recipe: str = "sana"):
    """Run ``recipes/<recipe>_lora.py`` (default Sana) in a subprocess; returns CompletedProcess with text output."""
    if not CURRENT["slow"]:
        pytest.fail("this test runs a recipe but is not marked slow: add @pytest.mark.slow", pytrace=False)
    full_env = {**os.environ, "PYTHONUNBUFFERED": "1", **(env or {})}
    script = RECIPE if recipe == "sana" else ROOT / "recipes" / f"{recipe}_lora.py"
    cmd = (launcher or [sys.executable]) + [str(script), *args]
    return subprocess.run(cmd, capture_output=True, text=True, env=full_env, timeout=timeout, cwd=ROOT)


def read_summary(out: Path) -> dict:
    """The run's ``train_summary.json``."""
    return json.loads((Path(out) / "train_summary.json").read_text())


def train_in_process(model, data, tmp_path, *, on_step=None, **overrides):
    """Train in-process (much faster than a subprocess); returns (summary or exception, output dir)."""
    from accelerate.state import AcceleratorState

    from dit_lora.config import parse_config
    from dit_lora.training.loop import train

    out = tmp_path / "out"
    opts = {"max_train_steps": 10, "lr_scheduler": "linear", "lr_warmup_steps": 2, "attention_canary": "false"}
    opts.update(overrides)
    cfg = parse_config(base_args(model, data, out, tmp_path / "cache", **opts))
    AcceleratorState._reset_state(True)
    try:
        return train(cfg, on_step=on_step), out
    except Exception as err:  # noqa: BLE001 - the caller asserts on the exception
        return err, out
    finally:
        AcceleratorState._reset_state(True)
