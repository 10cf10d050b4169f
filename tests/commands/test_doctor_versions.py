"""`dit_lora.commands.doctor_versions`: an out-of-range or missing package is a block with the exact pip fix (an
optional one is fine absent); TESTED_RANGES mirrors pyproject.toml and caps the stack at the tested minor series.
"""

from __future__ import annotations

import pytest

from dit_lora.commands import doctor
from dit_lora.commands import doctor_versions
from helpers import ROOT


def _by_name(checks):
    return {c.name: c for c in checks}


def test_out_of_range_version_blocks_with_pip_fix(fake_versions):
    fake_versions["diffusers"] = "0.30.0"
    fake_versions["datasets"] = None  # not installed
    fake_versions["bitsandbytes"] = None  # optional: fine
    checks = _by_name(doctor.run_checks())
    assert checks["diffusers"].status == "block"
    assert f'pip install "diffusers{doctor_versions.TESTED_RANGES["diffusers"]}"' in checks["diffusers"].message
    assert checks["datasets"].status == "block" and f'pip install "datasets{doctor_versions.TESTED_RANGES["datasets"]}"' in checks["datasets"].message
    assert checks["bitsandbytes"].status == "ok" and checks["bitsandbytes"].value == "not installed (optional)"
    assert checks["torch"].status == "ok"


def test_tested_ranges_mirror_pyproject():
    tomllib = pytest.importorskip("tomllib")
    from packaging.requirements import Requirement
    from packaging.utils import canonicalize_name

    def spec(text: str) -> str:  # normalised specifier string (packaging sorts the clauses)
        return str(Requirement(f"x{text}").specifier)

    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    declared = {canonicalize_name(r.name): str(r.specifier) for r in map(Requirement, project["dependencies"])}
    assert declared == {canonicalize_name(k): spec(v) for k, v in doctor_versions.TESTED_RANGES.items()}
    optional = {canonicalize_name(r.name): str(r.specifier)
                for group in ("flash", "triton", "quant")
                for r in map(Requirement, project["optional-dependencies"][group])}
    assert optional == {canonicalize_name(k): spec(v) for k, v in doctor_versions.OPTIONAL_RANGES.items()}
    assert project["requires-python"] == doctor_versions.REQUIRES_PYTHON


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
        spec = Requirement(f"{name}{doctor_versions.TESTED_RANGES[name]}").specifier
        version = tested[canonicalize_name(name)]
        assert version in spec, f"{name}: the tested {version} is outside {spec}"
        next_minor = Version(f"{version.major}.{version.minor + 1}")
        # the next minor release (the first version that was never tested) is refused
        assert next_minor not in spec, f"{name}{spec} admits {next_minor}, which CI never tested"
        # transformers 5.24.0, the release that broke the plain install, in particular
    assert Version("5.24.0") not in Requirement(f"x{doctor_versions.TESTED_RANGES['transformers']}").specifier
