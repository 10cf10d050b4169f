"""Environment checks: installed versions, device, and known-bad package combinations.

``dit-lora doctor`` prints the full table; recipes call :func:`ensure_environment` first so
that a broken environment fails in one second with the exact ``pip install`` fix instead of
an ImportError (or a NaN) an hour into a run.

Importing this module is cheap on purpose: torch and the Hugging Face libraries are only
imported inside :func:`run_checks`, and every import there is guarded, because the doctor
must be able to report on exactly the environments in which those imports crash.
"""

from __future__ import annotations

import email.message
import functools
import importlib
import importlib.metadata as metadata
import importlib.util
import os
import re
import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, cast

from dit_lora.core.errors import UserError
from dit_lora.modelfiles import tokenizer_files as tf
from dit_lora.setup.tokenizer_check import requirements

# Mirrors [project].dependencies in pyproject.toml (tests/commands/test_doctor.py asserts they agree).
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

# peft < 0.18 does `from transformers import HybridCache` at import time; transformers 5
# removed that symbol, so `import peft` raises ImportError (fixed in peft 0.18.0).
PEFT_MIN_FOR_TRANSFORMERS_5 = "0.18.0"
# Used when the installed diffusers/transformers source cannot be read (see _min_peft_from_source).
FALLBACK_DIFFUSERS_MIN_PEFT = "0.6.0"

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


def _parse(version: str):
    from packaging.version import InvalidVersion, Version

    try:
        return Version(version)
    except InvalidVersion:
        return None


def in_range(version: str, spec: str) -> bool | None:
    """True/False when ``version`` is inside/outside ``spec``; None when it cannot be parsed."""
    from packaging.specifiers import SpecifierSet

    parsed = _parse(version)
    if parsed is None:
        return None
    # prereleases=True: a torch nightly (2.9.0.dev...) inside the range is still inside the range.
    return SpecifierSet(spec).contains(parsed, prereleases=True)


def _first_line(err: BaseException) -> str:
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


def _python_check() -> Check:
    version = ".".join(str(p) for p in sys.version_info[:3])
    if in_range(version, REQUIRES_PYTHON):
        return Check("python", version)
    return Check(
        "python",
        version,
        BLOCK,
        f"dit-lora needs Python {REQUIRES_PYTHON}; create a new environment with a newer Python (e.g. 3.11).",
    )


def _package_check(dist: str, spec: str, *, optional: bool, import_check: bool) -> Check:
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
                f"{dist} {version} is installed but fails to import ({_first_line(err)}). Fix: {fix}",
            )
    return Check(dist, version)


def _device_checks() -> list[Check]:
    """Device name/count and bf16 support; tolerant of a missing or broken torch."""
    try:
        import torch
    except BaseException as err:
        return [Check("device", "unknown", WARN, f"torch does not import ({_first_line(err)}).")]
    checks = []
    try:
        cuda = torch.cuda.is_available()
        if cuda:
            count = torch.cuda.device_count()
            name = torch.cuda.get_device_name(0)
            checks.append(Check("device", f"CUDA x{count}: {name} (CUDA {torch.version.cuda})"))
            if torch.cuda.is_bf16_supported():
                checks.append(Check("bf16", "supported"))
            else:
                checks.append(
                    Check(
                        "bf16",
                        "not supported",
                        WARN,
                        f"{name} has no bf16; set mixed_precision to 'no' (fp32) in the config and in "
                        "the accelerate config (fp16 LoRA training without loss scaling can go NaN).",
                    )
                )
        else:
            checks.append(
                Check(
                    "device",
                    "CPU (no CUDA device)",
                    OK,
                    "CPU runs are for smoke tests only; training a real model needs a CUDA GPU.",
                )
            )
            with torch.autocast("cpu", dtype=torch.bfloat16):
                out = torch.ones(2, 2) @ torch.ones(2, 2)
            ok = out.dtype == torch.bfloat16
            checks.append(
                Check(
                    "bf16",
                    "CPU autocast works" if ok else "CPU autocast inactive",
                    OK if ok else WARN,
                    "" if ok else "use mixed_precision 'no' on this machine.",
                )
            )
    except BaseException as err:
        checks.append(
            Check(
                "device",
                "unknown",
                WARN,
                f"querying the device failed ({_first_line(err)}); check the NVIDIA driver (nvidia-smi).",
            )
        )
    return checks


def _min_peft_from_source(dist: str, relpath: str, fallback: str | None) -> str | None:
    """Read ``MIN_PEFT_VERSION = "x"`` from an installed package's source without importing it.

    diffusers (utils/constants.py) and transformers (integrations/peft.py) raise ValueError in
    their LoRA loaders (``check_peft_version``) when peft is older than this constant. Reading
    the file keeps the doctor cheap and works even when the package itself fails to import.
    """
    try:
        spec = importlib.util.find_spec(dist)
        if spec is None or not spec.submodule_search_locations:
            return fallback
        path = Path(list(spec.submodule_search_locations)[0]) / relpath
        match = re.search(r'^MIN_PEFT_VERSION\s*=\s*["\']([^"\']+)["\']', path.read_text(), re.M)
        return match.group(1) if match else fallback
    except Exception:
        return fallback


def _version_lt(a: str, b: str) -> bool:
    pa, pb = _parse(a), _parse(b)
    return pa is not None and pb is not None and pa < pb


def _peft_fix(need: str, who: str) -> str:
    """The fix for a peft older than ``who`` needs: a newer peft when the tested range has one, else ``who`` back in
    its tested range (transformers 5.24 needs peft 0.22, which no tested range admits: the fix is the older
    transformers, not a peft that may not exist)."""
    from packaging.specifiers import SpecifierSet

    peft_range = SpecifierSet(TESTED_RANGES["peft"])
    upper = [s.version for s in peft_range if s.operator in ("<", "<=")]
    if not upper or not _version_lt(need, upper[0]):
        return (
            f'Fix: pip install "{who}{TESTED_RANGES[who]}" (the tested range; its peft need is met by peft'
            f"{TESTED_RANGES['peft']})"
        )
    return f'Fix: pip install "peft>={need},<{upper[0]}"'


def _peft_combination_checks() -> list[Check]:
    """peft versions that the installed diffusers / transformers refuse."""
    checks: list[Check] = []
    needs: list[str] = []  # "<who> needs peft>=x", shown on the ok line
    peft = installed_version("peft")
    if peft is None:
        return checks  # already a block from the version table
    peft_base = _parse(peft).base_version if _parse(peft) else peft
    diffusers = installed_version("diffusers")
    if diffusers is not None:
        need = _min_peft_from_source("diffusers", "utils/constants.py", FALLBACK_DIFFUSERS_MIN_PEFT)
        needs.append(f"diffusers needs >={need}")
        if need and _version_lt(peft_base, need):
            checks.append(
                Check(
                    "peft vs diffusers",
                    f"peft {peft} / diffusers {diffusers}",
                    BLOCK,
                    f"diffusers {diffusers} refuses peft {peft} for LoRA (check_peft_version needs "
                    f"peft>={need}; load_lora_weights/add_adapter raise ValueError). " + _peft_fix(need, "diffusers"),
                )
            )
    transformers = installed_version("transformers")
    if transformers is not None:
        need = _min_peft_from_source("transformers", "integrations/peft.py", None)
        parsed = _parse(transformers)
        # transformers >= 5: old peft cannot even be imported (HybridCache was removed).
        transformers_5 = parsed is not None and not _version_lt(transformers, "5.0.0.dev0")
        if transformers_5 and (need is None or _version_lt(need, PEFT_MIN_FOR_TRANSFORMERS_5)):
            need = PEFT_MIN_FOR_TRANSFORMERS_5
        if need:
            needs.append(f"transformers needs >={need}")
        if need and _version_lt(peft_base, need):
            checks.append(
                Check(
                    "peft vs transformers",
                    f"peft {peft} / transformers {transformers}",
                    BLOCK,
                    f"transformers {transformers} needs peft>={need} (older peft fails to import "
                    "against transformers 5, or is refused by transformers' adapter loading). "
                    + _peft_fix(need, "transformers"),
                )
            )
    if not checks and needs:
        checks.append(Check("peft compatibility", ", ".join(needs)))
    return checks


def _torchvision_check() -> Check | None:
    """torchvision built for a different torch breaks transformers/diffusers model imports."""
    tv = installed_version("torchvision")
    if tv is None:
        return None
    torch_v = installed_version("torch")
    fix = (
        "pip uninstall -y torchvision (dit-lora does not need it), or install the torchvision "
        "built for your torch from the same index as torch"
    )
    problem = None
    pt, pv = _parse(torch_v or ""), _parse(tv)
    if pt is not None and pv is not None:
        # torch 2.N pairs with torchvision 0.(N+15) (2.5 <-> 0.20, 2.6 <-> 0.21, ...).
        if pt.major == 2 and pv.major == 0 and pv.minor != pt.minor + 15:
            problem = f"torchvision {tv} is built for torch 2.{pv.minor - 15}, but torch {torch_v} is installed"
            fix += f' (e.g. pip install "torchvision==0.{pt.minor + 15}.*")'
        elif (pt.local or "") != (pv.local or "") and pt.local and pv.local:
            problem = f"torch is the +{pt.local} build but torchvision is the +{pv.local} build"
    if problem is None:
        # Import in a child process: a mismatched torchvision can abort the interpreter while
        # registering its C++ operators, and the doctor must survive to report it.
        try:
            proc = subprocess.run(
                [sys.executable, "-c", "import torchvision"], capture_output=True, text=True, timeout=120
            )
            if proc.returncode != 0:
                tail = (proc.stderr.strip().splitlines() or [f"exit code {proc.returncode}"])[-1]
                problem = f"torchvision {tv} fails to import ({tail})"
        except Exception as err:
            problem = f"torchvision {tv} import check failed ({_first_line(err)})"
    if problem is None:
        return Check("torchvision", tv)
    return Check(
        "torchvision",
        tv,
        WARN,
        f"{problem}; transformers/diffusers import it for image processors and then fail at model "
        f"import (typically 'operator torchvision::nms does not exist'). Fix: {fix}.",
    )


def _torch_cuda_sdpa_check() -> Check | None:
    torch_v = installed_version("torch")
    parsed = _parse(torch_v or "")
    if torch_v is None or parsed is None or parsed.release[:3] != (2, 5, 0):
        return None
    try:
        import torch

        if torch.version.cuda is None:
            return None
    except BaseException:
        return None
    return Check(
        "torch 2.5.0 + CUDA",
        torch_v,
        WARN,
        "torch 2.5.0 enables the cuDNN scaled-dot-product-attention backend by default on H100, "
        "which can produce NaN gradients in attention backward. Fix: "
        'pip install "torch>=2.5.1,<3" (or call torch.backends.cuda.enable_cudnn_sdp(False)).',
    )


def _kernels_shadow_check() -> Check:
    """A top-level ``kernels`` module that is not Hugging Face's ``kernels`` package.

    diffusers and transformers treat ``kernels`` as Hugging Face's hub-kernels package when it
    is importable and a ``kernels`` distribution is installed, then run ``from kernels import
    get_kernel``; a local ``kernels.py`` / ``kernels/`` directory (common name for a user's
    CUDA-kernel folder) shadows it and breaks attention-backend selection.
    """
    try:
        spec = importlib.util.find_spec("kernels")
    except BaseException as err:
        return Check(
            "kernels",
            "unimportable",
            BLOCK,
            f"a module named 'kernels' is on sys.path but breaks ({_first_line(err)}); rename it.",
        )
    if spec is None:
        return Check("kernels", "not installed (optional)")
    origin = spec.origin if spec.origin not in (None, "namespace") else None
    location = origin or ", ".join(spec.submodule_search_locations or []) or "?"
    version = installed_version("kernels")
    owned = False
    if version is not None and origin is not None:
        try:
            dist = metadata.distribution("kernels")
            # str(): typeshed's SimplePath is no os.PathLike; a file-system distribution locates a pathlib.Path
            files = {os.path.realpath(str(dist.locate_file(f))) for f in (dist.files or [])}
            owned = os.path.realpath(origin) in files
        except Exception:
            owned = False
    if version is None or not owned:  # owned needs an installed version
        reason = (
            "no 'kernels' distribution is installed"
            if version is None
            else f"Hugging Face's kernels {version} is installed but this file is found first"
        )
        return Check(
            "kernels",
            f"shadowed by {location}",
            BLOCK,
            f"the top-level module 'kernels' resolves to {location}, which is not Hugging Face's "
            f"'kernels' package ({reason}). Fix: rename that file/directory (or remove its folder from "
            "PYTHONPATH / the working directory).",
        )
    try:
        # an email Message (every field's values); typeshed's PackageMetadata protocol leaves values() out
        meta = cast(email.message.Message, metadata.metadata("kernels"))
        blob = " ".join(str(v) for v in meta.values()).lower()
    except Exception:
        blob = "huggingface"
    if "huggingface" not in blob and "hugging face" not in blob:
        return Check(
            "kernels",
            version,
            WARN,
            f"the installed 'kernels' {version} does not look like Hugging Face's kernels package; "
            "diffusers/transformers may call it as if it were. Fix: pip uninstall -y kernels.",
        )
    return Check("kernels", version)


def _fused_kernels_check() -> Check:
    """What ``--kernels on`` and ``--attention_backend auto`` would use on this machine."""
    import torch

    # here, not at the top: the doctor reports a broken torch install instead of failing to import
    from dit_lora.kernels.attention import resolve_backend
    from dit_lora.kernels.triton_launch import triton_usable

    device = "cuda" if torch.cuda.is_available() else "cpu"
    usable, why = triton_usable(device)
    backend = resolve_backend("auto", device)
    value = f"triton ops {'runnable' if usable else 'not runnable'}; attention auto -> {backend.name}"
    if usable:
        return Check("fused kernels", value)
    return Check("fused kernels", value, OK, f"{why}; `--kernels on` keeps the PyTorch paths")


def _quantize_check() -> Check:
    """``--quantize_base``: whether bitsandbytes and torchao are present and which schemes run on this device."""
    import torch

    # here, not at the top: the doctor reports a broken torch install instead of failing to import
    from dit_lora.modeling import quantize

    device = "cuda" if torch.cuda.is_available() else "cpu"
    present = ", ".join(f"{dist} {installed_version(dist) or 'absent'}" for dist in ("bitsandbytes", "torchao"))
    runs = quantize.what_runs(device)
    usable = [s for s, how in runs.items() if how == "runs"]
    value = f"{present}; on {device}: " + (", ".join(usable) if usable else "none") + " run"
    notes = "; ".join(f"{s}: {how[4:]}" for s, how in runs.items() if how != "runs")
    rounding = quantize.cpu_nf4_problem() if device == "cpu" and runs["nf4"] == "runs" else None
    if rounding:
        return Check(
            "quantized base", value, WARN, f"--quantize_base nf4: {rounding}." + (f" {notes}" if notes else "")
        )
    return Check("quantized base", value, OK, notes and f"--quantize_base {notes}")


def _compile_check() -> Check:
    """``--compile``: whether torch.compile can build kernels on this device (a C++ compiler, or Triton on CUDA)."""
    import torch

    # here, not at the top: the doctor reports a broken torch install instead of failing to import
    from dit_lora.training.compile import check_compiler

    device = "cuda" if torch.cuda.is_available() else "cpu"
    try:
        check_compiler("blocks", device)
    except UserError as err:
        return Check("compile", f"cannot run on {device}", OK, f"{err}")
    return Check("compile", f"--compile blocks/full can run on {device}", OK)


def model_checks(model: str, revision: str | None = None) -> list[Check]:
    """What ``model`` (a local folder or a Hub id) needs from this environment: its tokenizers' packages.

    A pipeline's ``tokenizer*/`` folders and a transformers model's root are each checked; a Hub id that is
    neither cached nor catalogued cannot be judged and says so.
    """
    local = Path(model)
    if local.is_dir():
        subfolders = [("" if f == local else f.name) for f in tf.tokenizer_folders(local)]
    else:
        subfolders = ["tokenizer", ""]
    checks, judged = [], False
    for sub in subfolders:
        reqs = requirements(model, sub, revision)
        if reqs is None:
            continue
        judged = True
        where = f"{model}/{sub}" if sub else model
        gaps = tf.missing(reqs)
        if gaps:
            names = " ".join(p for p, _ in gaps)
            checks.append(
                Check(
                    f"tokenizer {where}",
                    "missing " + names,
                    BLOCK,
                    "; ".join(why for _, why in gaps) + f". Fix: pip install {names}",
                )
            )
        else:
            checks.append(Check(f"tokenizer {where}", ", ".join(p for p, _ in reqs) or "tokenizers only", OK))
    if not judged:
        checks.append(
            Check(
                f"tokenizer {model}",
                "files unknown",
                WARN,
                "not a local folder, not in the Hub cache and not catalogued (`dit-lora models`): "
                "download it first or pass its local folder to check its tokenizer.",
            )
        )
    return checks


def run_checks(*, import_check: bool = True, model: str | None = None) -> list[Check]:
    """Run every environment check and return them in display order. Never raises.

    ``import_check=False`` skips actually importing the packages (version table only); ``model`` adds
    :func:`model_checks` for that model.
    """
    checks: list[Check] = [_safe(_python_check, "python")]
    for dist, spec in TESTED_RANGES.items():
        checks.append(
            _safe(functools.partial(_package_check, dist, spec, optional=False, import_check=import_check), dist)
        )
    for dist, spec in OPTIONAL_RANGES.items():
        checks.append(
            _safe(functools.partial(_package_check, dist, spec, optional=True, import_check=import_check), dist)
        )
    extra: list[tuple[str, Callable[[], object]]] = [
        ("device", _device_checks),
        ("peft compatibility", _peft_combination_checks),
        ("torchvision", _torchvision_check),
        ("torch 2.5.0 + CUDA", _torch_cuda_sdpa_check),
        ("kernels", _kernels_shadow_check),
        ("fused kernels", _fused_kernels_check),
        ("quantized base", _quantize_check),
        ("compile", _compile_check),
    ]
    if model:
        extra.append(("model", lambda: model_checks(model)))
    for name, fn in extra:
        result = _safe(fn, name)
        if isinstance(result, Check):
            checks.append(result)
        elif isinstance(result, list):
            checks.extend(result)
    return checks


def _safe(fn: Callable[[], object], name: str):
    """Call one check; an unexpected bug in a check becomes a warning line, not a crash."""
    try:
        return fn()
    except KeyboardInterrupt:
        raise
    except BaseException as err:
        return Check(name, "check failed", WARN, f"the doctor could not check this ({_first_line(err)}).")


def problems(checks: list[Check]) -> list[Check]:
    """The warn/block checks, blocks first."""
    return sorted((c for c in checks if c.status != OK), key=lambda c: c.status != BLOCK)


def format_table(checks: list[Check]) -> str:
    """Render checks as an aligned, human-readable table (status, then the fix for problems)."""
    width_name = max(len(c.name) for c in checks)
    width_value = min(max(len(c.value) for c in checks), 64)
    header = f"{'check':<{width_name}}  {'installed / found':<{width_value}}  status"
    lines = [header, "-" * len(header)]
    for c in checks:
        mark = {OK: "ok", WARN: "WARN", BLOCK: "BLOCK"}.get(c.status, c.status)
        line = f"{c.name:<{width_name}}  {c.value:<{width_value}}  {mark:<5}"
        if c.message:
            line += f"  {c.message}"
        lines.append(line.rstrip())
    return "\n".join(lines)


#: checks whose warning concerns only a run that uses what they check: the check's name -> that use, said in the
#: run's own options (a run that never quantizes to 4 bits is not warned that bitsandbytes rounds them wrongly)
RUN_CONCERNS: dict[str, Callable[[Any], bool]] = {
    "quantized base": lambda cfg: cfg.model.quantize_base == "nf4" or bool(cfg.model.quantize_text_encoder),
}


def ensure_environment(log: Callable[[str], object] = print, cfg: Any = None) -> list[Check]:
    """Check the environment at the start of a recipe.

    Logs only the problems (warn/block): with the run's ``cfg``, a warning of :data:`RUN_CONCERNS` only when the run
    uses what it checks. Raises :class:`UserError` with all blocking problems in one paragraph. Setting
    ``DIT_LORA_SKIP_ENV_CHECK=1`` downgrades blocks to warnings (for environments the doctor misjudges; unsupported).
    """
    checks = run_checks()
    found = [
        c
        for c in problems(checks)
        if c.status == BLOCK or cfg is None or c.name not in RUN_CONCERNS or RUN_CONCERNS[c.name](cfg)
    ]
    for c in found:
        log(f"[doctor] {c.status.upper()} {c.name} ({c.value}): {c.message}")
    blocks = [c for c in found if c.status == BLOCK]
    if blocks and os.environ.get("DIT_LORA_SKIP_ENV_CHECK", "") not in ("1", "true", "yes"):
        parts = " ".join(f"({i}) {c.name} {c.value}: {c.message}" for i, c in enumerate(blocks, 1))
        raise UserError(
            f"this Python environment cannot run dit-lora: {parts} Run `dit-lora doctor` for the full report "
            "(or set DIT_LORA_SKIP_ENV_CHECK=1 to continue anyway, unsupported)."
        )
    return checks
