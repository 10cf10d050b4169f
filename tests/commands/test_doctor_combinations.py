"""`dit_lora.commands.doctor_combinations`: the known-bad combinations are detected (peft refused by
diffusers/transformers, mismatched torchvision, torch 2.5.0 + CUDA, a `kernels` module shadowing Hugging Face's).
"""

from __future__ import annotations

import sys
from pathlib import Path

from dit_lora.commands import doctor
from dit_lora.commands import doctor_combinations
from dit_lora.commands import doctor_versions
from dit_lora.commands.doctor_versions import version_lt


def _by_name(checks):
    return {c.name: c for c in checks}


def test_peft_refused_by_diffusers_and_transformers(fake_versions):
    fake_versions["peft"] = "0.16.0"  # inside pyproject's range, but too old for the installed libraries
    checks = _by_name(doctor.run_checks())
    diff_min = doctor_combinations._min_peft_from_source("diffusers", "utils/constants.py", None)
    assert diff_min is not None  # the constant is still where we read it from
    tf_block = checks["peft vs transformers"]
    assert tf_block.status == "block" and 'pip install "peft>=' in tf_block.message
    if version_lt("0.16.0", diff_min):
        assert checks["peft vs diffusers"].status == "block"
        assert f'pip install "peft>={diff_min},<0.22"' in checks["peft vs diffusers"].message


def test_old_peft_with_transformers_5_blocks_even_without_source(fake_versions, monkeypatch):
    fake_versions["peft"] = "0.17.1"
    fake_versions["transformers"] = "5.0.0"
    monkeypatch.setattr(doctor_combinations, "_min_peft_from_source", lambda *a: None)
    checks = _by_name(doctor_combinations.peft_combination_checks())
    assert checks["peft vs transformers"].status == "block"
    assert 'pip install "peft>=0.18.0,<0.22"' in checks["peft vs transformers"].message


def test_a_peft_need_beyond_the_tested_range_fixes_the_library_not_peft(fake_versions, monkeypatch):
    # what a plain `pip install .` under `transformers<6` gave: transformers 5.24.0 (needs peft 0.22) and peft 0.21.2
    fake_versions["peft"] = "0.21.2"
    fake_versions["transformers"] = "5.24.0"
    monkeypatch.setattr(doctor_combinations, "_min_peft_from_source",
                        lambda dist, *a: "0.22.0" if dist == "transformers" else "0.6.0")
    block = _by_name(doctor_combinations.peft_combination_checks())["peft vs transformers"]
    assert block.status == "block"
    assert f'pip install "transformers{doctor_versions.TESTED_RANGES["transformers"]}"' in block.message
    assert "peft>=0.22" not in block.message.split("Fix:")[1]


def test_current_peft_is_compatible():
    checks = doctor_combinations.peft_combination_checks()
    assert [c.status for c in checks] == ["ok"], checks


def test_mismatched_torchvision_warns(fake_versions):
    fake_versions["torch"] = "2.6.0+cu124"
    fake_versions["torchvision"] = "0.20.1+cu124"  # built for torch 2.5
    check = doctor_combinations.torchvision_check()
    assert check.status == "warn"
    assert "torch 2.5" in check.message and "pip uninstall -y torchvision" in check.message
    assert '"torchvision==0.21.*"' in check.message


def test_torchvision_that_fails_to_import_warns(fake_versions, tmp_path, monkeypatch):
    fake_versions["torch"] = "2.6.0"
    fake_versions["torchvision"] = "0.21.0"  # matching versions, but the module itself is broken
    (tmp_path / "torchvision.py").write_text("raise RuntimeError('operator torchvision::nms does not exist')\n")
    monkeypatch.setenv("PYTHONPATH", str(tmp_path))
    check = doctor_combinations.torchvision_check()
    assert check.status == "warn" and "fails to import" in check.message and "nms" in check.message


def test_torch_250_with_cuda_warns(fake_versions, monkeypatch):
    import torch

    fake_versions["torch"] = "2.5.0+cu124"
    monkeypatch.setattr(torch.version, "cuda", "12.4")
    check = doctor_combinations.torch_cuda_sdpa_check()
    assert check.status == "warn" and 'pip install "torch>=2.5.1,<3"' in check.message
    fake_versions["torch"] = "2.5.1+cu124"
    assert doctor_combinations.torch_cuda_sdpa_check() is None


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
    assert doctor_combinations.kernels_shadow_check().status == "ok"  # nothing named kernels here

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
    ok = doctor_combinations.kernels_shadow_check()
    assert (ok.status, ok.value) == ("ok", "0.9.0")

    local = tmp_path / "project"
    (local / "kernels").mkdir(parents=True)
    (local / "kernels" / "__init__.py").write_text("")
    monkeypatch.syspath_prepend(str(local))  # now first on sys.path, like the working directory
    check = doctor_combinations.kernels_shadow_check()
    assert check.status == "block" and "is installed but this file is found first" in check.message
