"""`dit_lora.commands.doctor` and `dit-lora doctor`.

Proves: this environment passes (exit 0, no BLOCK); a blocking problem makes `dit-lora doctor` exit 1;
`ensure_environment` raises one UserError listing the blocks, and warns a run only of what it uses; a package that
crashes on import, or a check with a bug, is reported instead of crashing the doctor; importing the doctor does not
import torch.
"""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from dit_lora.commands import cli
from dit_lora.commands import doctor, doctor_versions
from dit_lora.core.errors import UserError
from helpers import ROOT


def _by_name(checks):
    return {c.name: c for c in checks}


def _run(args: list[str], **kw) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", "")}
    return subprocess.run([sys.executable, *args], cwd=ROOT, env=env, capture_output=True, text=True,
                          timeout=180, **kw)


@pytest.mark.slow  # the doctor's own torchvision check starts an interpreter
def test_doctor_cli_passes_in_this_environment(capsys):
    """``dit-lora doctor`` through the console script's entry point, in process: the libraries it imports are this
    process's (a fresh interpreter's start is test_importing_doctor_is_cheap's and the ``python -m`` tests')."""
    with pytest.raises(SystemExit) as ended:
        cli.main(["doctor"])
    out = capsys.readouterr().out
    assert ended.value.code == 0, out
    for name in ("python", "torch", "diffusers", "transformers", "peft", "accelerate", "datasets", "safetensors",
                 "huggingface_hub", "triton", "flash-attn", "bitsandbytes", "av", "device", "bf16", "kernels",
                 "fused kernels"):
        assert any(line.startswith(name + " ") for line in out.splitlines()), name
    assert "BLOCK" not in out
    assert "no blocking problems" in out


def test_importing_doctor_is_cheap():
    heavy = "('torch', 'diffusers', 'transformers', 'huggingface_hub')"
    proc = _run(["-c", f"import sys, dit_lora.commands.doctor, dit_lora.commands.cli; bad = [m for m in {heavy} if m in sys.modules]; "
                       "assert not bad, bad"])
    assert proc.returncode == 0, proc.stderr


def test_cli_doctor_exits_1_on_block(fake_versions, capsys):
    fake_versions["accelerate"] = "0.34.2"
    assert cli._main(["doctor", "--no-import"]) == 1
    out = capsys.readouterr().out
    assert "BLOCK" in out and f'pip install "accelerate{doctor_versions.TESTED_RANGES["accelerate"]}"' in out


def test_ensure_environment_raises_one_paragraph(fake_versions, monkeypatch):
    fake_versions["torch"] = "2.4.1"
    fake_versions["peft"] = "1.2.0"
    monkeypatch.delenv("DIT_LORA_SKIP_ENV_CHECK", raising=False)
    logged: list[str] = []
    with pytest.raises(UserError) as info:
        doctor.ensure_environment(log=logged.append)
    message = str(info.value)
    assert "\n" not in message
    assert f'pip install "torch{doctor_versions.TESTED_RANGES["torch"]}"' in message
    assert f'pip install "peft{doctor_versions.TESTED_RANGES["peft"]}"' in message
    assert "dit-lora doctor" in message
    # Only problems are logged, never the ok lines.
    assert logged and all(line.startswith("[doctor] ") and " ok" not in line for line in logged)
    assert not any(" diffusers (" in line for line in logged)

    monkeypatch.setenv("DIT_LORA_SKIP_ENV_CHECK", "1")
    checks = doctor.ensure_environment(log=lambda _m: None)  # downgraded: returns instead of raising
    assert any(c.status == "block" for c in checks)


def test_package_that_crashes_on_import_is_reported(fake_versions, tmp_path, monkeypatch):
    (tmp_path / "doctor_broken_mod.py").write_text("raise SystemExit('boom from a broken extension')\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setitem(doctor_versions.MODULE_NAMES, "av", "doctor_broken_mod")
    monkeypatch.setattr(doctor_versions, "IMPORT_CHECKED", ("av",))
    monkeypatch.setattr(doctor, "kernels_shadow_check", lambda: 1 / 0)  # a buggy check must not crash either
    checks = _by_name(doctor.run_checks())
    assert checks["av"].status == "block" and "fails to import" in checks["av"].message
    assert "boom" in checks["av"].message and 'pip install --force-reinstall "av>=12,<20"' in checks["av"].message
    assert checks["kernels"].status == "warn" and "could not check" in checks["kernels"].message


def test_a_runs_start_warns_of_nf4_rounding_only_when_the_run_quantizes_to_4_bits(monkeypatch):
    """Issue 76: the doctor's nf4 warning (bitsandbytes rounds 4-bit weights wrongly on this CPU) was printed at the
    start of runs that never quantize. `dit-lora doctor` itself still shows it."""
    from dit_lora.config import TrainConfig
    from dit_lora.modeling import quantize

    monkeypatch.setattr(quantize, "cpu_nf4_problem", lambda: "bitsandbytes rounds 4-bit weights wrongly here")
    monkeypatch.setattr("torch.cuda.is_available", lambda: False)
    said = {}
    for name, values in {"plain": {}, "fp8": {"quantize_base": "fp8_scaled"}, "nf4": {"quantize_base": "nf4"},
                         "text encoder": {"quantize_text_encoder": True}}.items():
        logged: list[str] = []
        doctor.ensure_environment(log=logged.append, cfg=TrainConfig(**values))
        said[name] = any("rounds 4-bit weights wrongly" in line for line in logged)
    assert said == {"plain": False, "fp8": False, "nf4": True, "text encoder": True}
    everything: list[str] = []
    doctor.ensure_environment(log=everything.append)  # no run: every warning, as `dit-lora doctor` shows them
    assert any("rounds 4-bit weights wrongly" in line for line in everything)
