"""`dit_lora.commands.doctor` and `dit-lora doctor`.

Proves: this environment passes (exit 0, no BLOCK); an out-of-range or missing package is a
block with the exact pip fix; `ensure_environment` raises one UserError listing the blocks;
the concrete known-bad combinations are detected (peft refused by diffusers/transformers,
mismatched torchvision, torch 2.5.0 + CUDA, a `kernels` module shadowing Hugging Face's);
a package that crashes on import is reported instead of crashing the doctor; importing the
doctor does not import torch; and TESTED_RANGES mirrors pyproject.toml.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from dit_lora.commands import cli
from dit_lora.commands import doctor
from dit_lora.core.errors import UserError
from helpers import ROOT



def _by_name(checks):
    return {c.name: c for c in checks}


@pytest.fixture
def fake_versions(monkeypatch):
    """Override installed_version for some distributions; the rest stay real."""
    overrides: dict[str, str | None] = {}
    real = doctor.installed_version
    monkeypatch.setattr(doctor, "installed_version", lambda dist: overrides[dist] if dist in overrides else real(dist))
    # Version-table tests do not need the (slow, already covered) import of every package.
    monkeypatch.setattr(doctor, "IMPORT_CHECKED", ())
    return overrides


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


def test_out_of_range_version_blocks_with_pip_fix(fake_versions):
    fake_versions["diffusers"] = "0.30.0"
    fake_versions["datasets"] = None  # not installed
    fake_versions["bitsandbytes"] = None  # optional: fine
    checks = _by_name(doctor.run_checks())
    assert checks["diffusers"].status == "block"
    assert f'pip install "diffusers{doctor.TESTED_RANGES["diffusers"]}"' in checks["diffusers"].message
    assert checks["datasets"].status == "block" and f'pip install "datasets{doctor.TESTED_RANGES["datasets"]}"' in checks["datasets"].message
    assert checks["bitsandbytes"].status == "ok" and checks["bitsandbytes"].value == "not installed (optional)"
    assert checks["torch"].status == "ok"


def test_cli_doctor_exits_1_on_block(fake_versions, capsys):
    fake_versions["accelerate"] = "0.34.2"
    assert cli._main(["doctor", "--no-import"]) == 1
    out = capsys.readouterr().out
    assert "BLOCK" in out and f'pip install "accelerate{doctor.TESTED_RANGES["accelerate"]}"' in out


def test_ensure_environment_raises_one_paragraph(fake_versions, monkeypatch):
    fake_versions["torch"] = "2.4.1"
    fake_versions["peft"] = "1.2.0"
    monkeypatch.delenv("DIT_LORA_SKIP_ENV_CHECK", raising=False)
    logged: list[str] = []
    with pytest.raises(UserError) as info:
        doctor.ensure_environment(log=logged.append)
    message = str(info.value)
    assert "\n" not in message
    assert f'pip install "torch{doctor.TESTED_RANGES["torch"]}"' in message
    assert f'pip install "peft{doctor.TESTED_RANGES["peft"]}"' in message
    assert "dit-lora doctor" in message
    # Only problems are logged, never the ok lines.
    assert logged and all(line.startswith("[doctor] ") and " ok" not in line for line in logged)
    assert not any(" diffusers (" in line for line in logged)

    monkeypatch.setenv("DIT_LORA_SKIP_ENV_CHECK", "1")
    checks = doctor.ensure_environment(log=lambda _m: None)  # downgraded: returns instead of raising
    assert any(c.status == "block" for c in checks)


def test_peft_refused_by_diffusers_and_transformers(fake_versions):
    fake_versions["peft"] = "0.16.0"  # inside pyproject's range, but too old for the installed libraries
    checks = _by_name(doctor.run_checks())
    diff_min = doctor._min_peft_from_source("diffusers", "utils/constants.py", None)
    assert diff_min is not None  # the constant is still where we read it from
    tf_block = checks["peft vs transformers"]
    assert tf_block.status == "block" and 'pip install "peft>=' in tf_block.message
    if doctor._version_lt("0.16.0", diff_min):
        assert checks["peft vs diffusers"].status == "block"
        assert f'pip install "peft>={diff_min},<0.22"' in checks["peft vs diffusers"].message


def test_old_peft_with_transformers_5_blocks_even_without_source(fake_versions, monkeypatch):
    fake_versions["peft"] = "0.17.1"
    fake_versions["transformers"] = "5.0.0"
    monkeypatch.setattr(doctor, "_min_peft_from_source", lambda *a: None)
    checks = _by_name(doctor._peft_combination_checks())
    assert checks["peft vs transformers"].status == "block"
    assert 'pip install "peft>=0.18.0,<0.22"' in checks["peft vs transformers"].message


def test_a_peft_need_beyond_the_tested_range_fixes_the_library_not_peft(fake_versions, monkeypatch):
    # what a plain `pip install .` under `transformers<6` gave: transformers 5.24.0 (needs peft 0.22) and peft 0.21.2
    fake_versions["peft"] = "0.21.2"
    fake_versions["transformers"] = "5.24.0"
    monkeypatch.setattr(doctor, "_min_peft_from_source",
                        lambda dist, *a: "0.22.0" if dist == "transformers" else "0.6.0")
    block = _by_name(doctor._peft_combination_checks())["peft vs transformers"]
    assert block.status == "block"
    assert f'pip install "transformers{doctor.TESTED_RANGES["transformers"]}"' in block.message
    assert "peft>=0.22" not in block.message.split("Fix:")[1]


def test_current_peft_is_compatible():
    checks = doctor._peft_combination_checks()
    assert [c.status for c in checks] == ["ok"], checks


def test_mismatched_torchvision_warns(fake_versions):
    fake_versions["torch"] = "2.6.0+cu124"
    fake_versions["torchvision"] = "0.20.1+cu124"  # built for torch 2.5
    check = doctor._torchvision_check()
    assert check.status == "warn"
    assert "torch 2.5" in check.message and "pip uninstall -y torchvision" in check.message
    assert '"torchvision==0.21.*"' in check.message


def test_torchvision_that_fails_to_import_warns(fake_versions, tmp_path, monkeypatch):
    fake_versions["torch"] = "2.6.0"
    fake_versions["torchvision"] = "0.21.0"  # matching versions, but the module itself is broken
    (tmp_path / "torchvision.py").write_text("raise RuntimeError('operator torchvision::nms does not exist')\n")
    monkeypatch.setenv("PYTHONPATH", str(tmp_path))
    check = doctor._torchvision_check()
    assert check.status == "warn" and "fails to import" in check.message and "nms" in check.message


def test_torch_250_with_cuda_warns(fake_versions, monkeypatch):
    import torch

    fake_versions["torch"] = "2.5.0+cu124"
    monkeypatch.setattr(torch.version, "cuda", "12.4")
    check = doctor._torch_cuda_sdpa_check()
    assert check.status == "warn" and 'pip install "torch>=2.5.1,<3"' in check.message
    fake_versions["torch"] = "2.5.1+cu124"
    assert doctor._torch_cuda_sdpa_check() is None


def test_package_that_crashes_on_import_is_reported(fake_versions, tmp_path, monkeypatch):
    (tmp_path / "doctor_broken_mod.py").write_text("raise SystemExit('boom from a broken extension')\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setitem(doctor.MODULE_NAMES, "av", "doctor_broken_mod")
    monkeypatch.setattr(doctor, "IMPORT_CHECKED", ("av",))
    monkeypatch.setattr(doctor, "_kernels_shadow_check", lambda: 1 / 0)  # a buggy check must not crash either
    checks = _by_name(doctor.run_checks())
    assert checks["av"].status == "block" and "fails to import" in checks["av"].message
    assert "boom" in checks["av"].message and 'pip install --force-reinstall "av>=12,<20"' in checks["av"].message
    assert checks["kernels"].status == "warn" and "could not check" in checks["kernels"].message


def _fake_hf_kernels_dist(site: Path) -> None:
    """A minimal installed 'kernels' distribution (dist-info + RECORD) under ``site``."""
    (site / "kernels").mkdir(parents=True)
    (site / "kernels" / "__init__.py").write_text("def get_kernel(name): ...\n")
    info = site / "kernels-0.9.0.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: kernels\nVersion: 0.9.0\n"
                                   "Project-URL: Repository, https://github.com/huggingface/kernels\n")
    (info / "RECORD").write_text("kernels/__init__.py,,\nkernels-0.9.0.dist-info/METADATA,,\n")


def test_kernels_shadowing_is_a_block(tmp_path, monkeypatch):
    monkeypatch.delitem(sys.modules, "kernels", raising=False)
    assert doctor._kernels_shadow_check().status == "ok"  # nothing named kernels here

    local = tmp_path / "project"
    local.mkdir()
    (local / "kernels.py").write_text("# the user's own CUDA kernels\n")
    monkeypatch.syspath_prepend(str(local))
    check = _by_name(doctor.run_checks(import_check=False))["kernels"]
    assert check.status == "block"
    assert str(local / "kernels.py") in check.message and "rename" in check.message


def test_real_hf_kernels_passes_and_local_file_shadowing_it_blocks(tmp_path, monkeypatch):
    monkeypatch.delitem(sys.modules, "kernels", raising=False)
    site = tmp_path / "site"
    _fake_hf_kernels_dist(site)
    monkeypatch.syspath_prepend(str(site))
    ok = doctor._kernels_shadow_check()
    assert (ok.status, ok.value) == ("ok", "0.9.0")

    local = tmp_path / "project"
    (local / "kernels").mkdir(parents=True)
    (local / "kernels" / "__init__.py").write_text("")
    monkeypatch.syspath_prepend(str(local))  # now first on sys.path, like the working directory
    check = doctor._kernels_shadow_check()
    assert check.status == "block" and "is installed but this file is found first" in check.message


def test_tested_ranges_mirror_pyproject():
    tomllib = pytest.importorskip("tomllib")
    from packaging.requirements import Requirement
    from packaging.utils import canonicalize_name

    def spec(text: str) -> str:  # normalised specifier string (packaging sorts the clauses)
        return str(Requirement(f"x{text}").specifier)

    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    declared = {canonicalize_name(r.name): str(r.specifier) for r in map(Requirement, project["dependencies"])}
    assert declared == {canonicalize_name(k): spec(v) for k, v in doctor.TESTED_RANGES.items()}
    optional = {canonicalize_name(r.name): str(r.specifier)
                for group in ("flash", "triton", "quant")
                for r in map(Requirement, project["optional-dependencies"][group])}
    assert optional == {canonicalize_name(k): spec(v) for k, v in doctor.OPTIONAL_RANGES.items()}
    assert project["requires-python"] == doctor.REQUIRES_PYTHON


#: the torch / Hugging Face stack: a new minor of any of them has changed what the others need (transformers 5.24
#: required peft >= 0.22, which did not exist), so pyproject admits only the minor series CI tested
_STACK = ("torch", "diffusers", "transformers", "peft", "accelerate", "datasets", "huggingface_hub", "tokenizers",
          "safetensors")


def test_the_stack_is_capped_at_the_tested_minor_series():
    from packaging.requirements import Requirement
    from packaging.utils import canonicalize_name
    from packaging.version import Version

    tested = {}
    for line in (ROOT / "constraints.txt").read_text().splitlines():
        if "==" in line and not line.startswith("#"):
            name, version = line.split("==")
            tested[canonicalize_name(name)] = Version(version.split("+")[0])
    for name in _STACK:
        spec = Requirement(f"{name}{doctor.TESTED_RANGES[name]}").specifier
        version = tested[canonicalize_name(name)]
        assert version in spec, f"{name}: the tested {version} is outside {spec}"
        next_minor = Version(f"{version.major}.{version.minor + 1}")
        # the next minor release (the first version that was never tested) is refused
        assert next_minor not in spec, f"{name}{spec} admits {next_minor}, which CI never tested"
        # transformers 5.24.0, the release that broke the plain install, in particular
    assert Version("5.24.0") not in Requirement(f"x{doctor.TESTED_RANGES['transformers']}").specifier


def test_a_cpu_that_rounds_nf4_wrongly_is_a_warning(monkeypatch):
    import torch

    from dit_lora.modeling import quantize

    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    monkeypatch.setattr(quantize, "cpu_nf4_problem", lambda: "bitsandbytes X rounds 4-bit weights wrongly")
    check = doctor._quantize_check()
    assert check.status == doctor.WARN and "--quantize_base nf4: bitsandbytes X rounds" in check.message
    monkeypatch.setattr(quantize, "cpu_nf4_problem", lambda: None)
    assert doctor._quantize_check().status == doctor.OK


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
