"""The doctor's version table: the tested range of each package (pyproject's), Python's, and one check per package
(installed, inside its range, importing); a :class:`Check` is one line of the doctor's report.

Nothing heavy is imported at the top: a package is imported only by its own check, guarded, because the doctor must
report on exactly the environments in which those imports crash.
"""

from __future__ import annotations

import importlib
import importlib.metadata as metadata
import sys
from dataclasses import dataclass

# Mirrors [project].dependencies in pyproject.toml (tests/commands/test_doctor_versions.py asserts they agree).
# Keys are distribution names as pip spells them; values are PEP 440 specifiers.
TESTED_RANGES: dict[str, str] = {
    "torch": ">=2.6,<2.14",
    "diffusers": ">=0.34,<0.43",
    "transformers": ">=4.51,<5.24",
    "peft": ">=0.18,<0.22",
    "accelerate": ">=1.2,<1.16",
    "datasets": ">=3.0,<5.3",
    "safetensors": ">=0.5,<0.9",
    "huggingface_hub": ">=1.0,<2.5",
    "tokenizers": ">=0.21,<0.24",
    "sentencepiece": ">=0.2,<1",
    "protobuf": ">=4,<8",
    "packaging": ">=23",
    "av": ">=12,<20",
    "numpy": ">=1.26,<3",
    "pillow": ">=10,<14",
    "pyyaml": ">=6,<7",
    "tqdm": ">=4.66,<5",
    "tensorboard": ">=2.15,<3",
    "ftfy": ">=6,<7",  # diffusers' WanImageToVideoPipeline cleans prompts with it
}

# Mirrors [project.optional-dependencies]; missing is fine, installed-but-broken is a warning.
OPTIONAL_RANGES: dict[str, str] = {
    "triton": ">=3.0,<4",
    "flash-attn": ">=2.6",
    "bitsandbytes": ">=0.45,<1",
    "torchao": ">=0.18,<0.19",
}

REQUIRES_PYTHON = ">=3.10"

# Distribution name -> top-level module, where they differ.
MODULE_NAMES: dict[str, str] = {
    "flash-attn": "flash_attn",
    "pillow": "PIL",
    "pyyaml": "yaml",
}

# Packages whose import is attempted: a package that is installed but crashes on import
# (ABI mismatch, a dependency that is too new) is the most common "it worked yesterday".
# The small pure-python ones are covered by the version check alone.
IMPORT_CHECKED = (
    "torch",
    "diffusers",
    "transformers",
    "peft",
    "accelerate",
    "datasets",
    "safetensors",
    "huggingface_hub",
    "av",
)

OK, WARN, BLOCK = "ok", "warn", "block"


@dataclass
class Check:
    """One line of the doctor report.

    ``status`` is ``"ok"``, ``"warn"`` (works, but something is likely to bite) or ``"block"``
    (dit-lora will not run correctly); ``message`` says what is wrong and how to fix it.
    """

    name: str
    value: str
    status: str = OK
    message: str = ""


def pip_fix(dist: str, spec: str | None = None) -> str:
    """Return the exact pip command that installs ``dist`` inside its tested range."""
    spec = spec if spec is not None else TESTED_RANGES.get(dist, OPTIONAL_RANGES.get(dist, ""))
    return f'pip install "{dist}{spec}"'


def installed_version(dist: str) -> str | None:
    """Version string of an installed distribution, or None when it is not installed."""
    try:
        return metadata.version(dist)
    except metadata.PackageNotFoundError:
        return None
    except Exception:  # a corrupt dist-info must not crash the doctor
        return None


def parse_version(version: str):
    """``version`` as packaging's ``Version``, or None when it is not a valid version."""
    from packaging.version import InvalidVersion, Version

    try:
        return Version(version)
    except InvalidVersion:
        return None


def version_lt(a: str, b: str) -> bool:
    """Whether version ``a`` is older than ``b`` (False when either cannot be parsed)."""
    pa, pb = parse_version(a), parse_version(b)
    return pa is not None and pb is not None and pa < pb


def in_range(version: str, spec: str) -> bool | None:
    """True/False when ``version`` is inside/outside ``spec``; None when it cannot be parsed."""
    from packaging.specifiers import SpecifierSet

    parsed = parse_version(version)
    if parsed is None:
        return None
    # prereleases=True: a torch nightly (2.9.0.dev...) inside the range is still inside the range.
    return SpecifierSet(spec).contains(parsed, prereleases=True)


def first_line(err: BaseException) -> str:
    """``Type: first line of the message`` of ``err``, for a report line."""
    text = str(err).strip().splitlines()
    return f"{type(err).__name__}: {text[0] if text else ''}".strip()


def _try_import(module: str) -> BaseException | None:
    """Import ``module``; return the exception instead of raising (SystemExit included)."""
    try:
        importlib.import_module(module)
    except KeyboardInterrupt:
        raise
    except BaseException as err:
        return err
    return None


def python_check() -> Check:
    """This Python inside :data:`REQUIRES_PYTHON`, else a block."""
    version = ".".join(str(p) for p in sys.version_info[:3])
    if in_range(version, REQUIRES_PYTHON):
        return Check("python", version)
    return Check(
        "python",
        version,
        BLOCK,
        f"dit-lora needs Python {REQUIRES_PYTHON}; create a new environment with a newer Python (e.g. 3.11).",
    )


def package_check(dist: str, spec: str, *, optional: bool, import_check: bool) -> Check:
    """``dist`` installed inside ``spec`` and, when ``import_check``, importing (a required package's problem
    blocks, an optional one's warns; an optional package that is absent is fine)."""
    version = installed_version(dist)
    if version is None:
        if optional:
            return Check(dist, "not installed (optional)")
        return Check(dist, "not installed", BLOCK, f"{dist} is required but not installed. Fix: {pip_fix(dist, spec)}")
    ok = in_range(version, spec)
    if ok is None:
        return Check(dist, version, WARN, f"cannot parse version {version!r}; tested range is {spec}.")
    if not ok:
        status = WARN if optional else BLOCK
        return Check(
            dist, version, status, f"{dist} {version} is outside the tested range {spec}. Fix: {pip_fix(dist, spec)}"
        )
    if import_check and (optional or dist in IMPORT_CHECKED):
        err = _try_import(MODULE_NAMES.get(dist, dist))
        if err is not None:
            status = WARN if optional else BLOCK
            fix = (
                f"pip uninstall -y {dist} (it is optional)"
                if optional
                else f'pip install --force-reinstall "{dist}{spec}"'
            )
            return Check(
                dist,
                version,
                status,
                f"{dist} {version} is installed but fails to import ({first_line(err)}). Fix: {fix}",
            )
    return Check(dist, version)
