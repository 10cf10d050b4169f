"""``python -m dit_lora`` (``dit_lora/__main__.py``) and its ``train`` command: the entry point of a ``pip install``,
alone or under ``accelerate launch -m dit_lora train`` / ``dit-lora launch -m dit_lora train``."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from helpers import ROOT, base_args, free_port, read_summary

LAUNCH_OPTS = ["--num_processes", "1", "--num_machines", "1", "--mixed_precision", "no", "--dynamo_backend", "no",
               "--num_cpu_threads_per_process", "1"]


def _run(cmd: list[str], cwd, timeout: int = 400) -> subprocess.CompletedProcess:
    """``cmd`` from ``cwd`` (not the checkout): the package is found as installed (or on PYTHONPATH), no recipe."""
    env = {**os.environ, "PYTHONUNBUFFERED": "1", "OMP_NUM_THREADS": "1",
           "PYTHONPATH": os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH")) if p)}
    return subprocess.run(cmd, capture_output=True, text=True, env=env, cwd=cwd, timeout=timeout)


def test_train_handles_signals_from_its_first_line_and_ends_a_user_error_in_one_paragraph(capsys):
    from dit_lora.commands import cli
    from dit_lora.training import signals

    assert not signals.installed()
    try:
        with pytest.raises(SystemExit) as stop:
            cli.main(["train", "--family", "cogvidex"])
        assert signals.installed()  # as recipe.main: a SIGTERM before training starts stops in one line
    finally:
        signals.release()
    err = capsys.readouterr().err
    assert stop.value.code == 2 and err.startswith("error: `family` in --family is `cogvidex`")
    assert "Traceback" not in err


@pytest.mark.slow
def test_python_m_dit_lora_train_runs_the_demo_config_from_another_folder(tmp_path):
    """The demo config's relative paths (.dit_lora_demo/...) land in the folder the command runs from."""
    config = ROOT / "recipes" / "configs" / "sana" / "demo.yaml"
    proc = _run([sys.executable, "-m", "dit_lora", "train", "--config", str(config), "--max_train_steps", "1",
                 "--skip_doctor", "--report_to", "none", "--ignore_memory_plan"], cwd=tmp_path)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    out = tmp_path / ".dit_lora_demo" / "output"
    summary = read_summary(out)
    assert summary["family"] == "sana" and summary["steps"] == 1 and summary["status"] == "completed"
    assert (out / "pytorch_lora_weights.safetensors").is_file()


@pytest.mark.slow
@pytest.mark.parametrize("launcher", ["accelerate", "dit-lora"])
def test_train_under_a_launcher(tmp_path, tiny_sana, shapes_data, launcher):
    """``accelerate launch -m dit_lora train`` and ``dit-lora launch -m dit_lora train``; the family comes from the
    model (no --family, no config)."""
    command = ([sys.executable, "-m", "accelerate.commands.launch"] if launcher == "accelerate"
               else [sys.executable, "-m", "dit_lora", "launch"])
    out = tmp_path / "out"
    args = base_args(tiny_sana, shapes_data, out, tmp_path / "cache", max_train_steps=2)
    proc = _run([*command, *LAUNCH_OPTS, "--main_process_port", str(free_port()), "-m", "dit_lora", "train", *args],
                cwd=tmp_path)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    summary = read_summary(out)
    assert summary["family"] == "sana" and summary["steps"] == 2 and summary["num_processes"] == 1
