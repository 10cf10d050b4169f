"""Known-bad combinations of installed packages: a peft the installed diffusers or transformers refuses, a
torchvision built for another torch, torch 2.5.0's cuDNN attention on CUDA, and a local ``kernels`` module shadowing
Hugging Face's. Each is found without importing the package that would crash (a source file read, a child process).
"""

from __future__ import annotations

import email.message
import importlib.metadata as metadata
import importlib.util
import os
import re
import subprocess
import sys
from pathlib import Path
from typing import cast

from dit_lora.commands.doctor_versions import (
    BLOCK,
    TESTED_RANGES,
    WARN,
    Check,
    first_line,
    installed_version,
    parse_version,
    version_lt,
)

# peft < 0.18 does `from transformers import HybridCache` at import time; transformers 5
# removed that symbol, so `import peft` raises ImportError (fixed in peft 0.18.0).
PEFT_MIN_FOR_TRANSFORMERS_5 = "0.18.0"

# Used when the installed diffusers/transformers source cannot be read (see _min_peft_from_source).
FALLBACK_DIFFUSERS_MIN_PEFT = "0.6.0"


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


def _peft_fix(need: str, who: str) -> str:
    """The fix for a peft older than ``who`` needs: a newer peft when the tested range has one, else ``who`` back in
    its tested range (transformers 5.24 needs peft 0.22, which no tested range admits: the fix is the older
    transformers, not a peft that may not exist)."""
    from packaging.specifiers import SpecifierSet

    peft_range = SpecifierSet(TESTED_RANGES["peft"])
    upper = [s.version for s in peft_range if s.operator in ("<", "<=")]
    if not upper or not version_lt(need, upper[0]):
        return (
            f'Fix: pip install "{who}{TESTED_RANGES[who]}" (the tested range; its peft need is met by peft'
            f"{TESTED_RANGES['peft']})"
        )
    return f'Fix: pip install "peft>={need},<{upper[0]}"'


def peft_combination_checks() -> list[Check]:
    """peft versions that the installed diffusers / transformers refuse."""
    checks: list[Check] = []
    needs: list[str] = []  # "<who> needs peft>=x", shown on the ok line
    peft = installed_version("peft")
    if peft is None:
        return checks  # already a block from the version table
    peft_base = parse_version(peft).base_version if parse_version(peft) else peft
    diffusers = installed_version("diffusers")
    if diffusers is not None:
        need = _min_peft_from_source("diffusers", "utils/constants.py", FALLBACK_DIFFUSERS_MIN_PEFT)
        needs.append(f"diffusers needs >={need}")
        if need and version_lt(peft_base, need):
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
        parsed = parse_version(transformers)
        # transformers >= 5: old peft cannot even be imported (HybridCache was removed).
        transformers_5 = parsed is not None and not version_lt(transformers, "5.0.0.dev0")
        if transformers_5 and (need is None or version_lt(need, PEFT_MIN_FOR_TRANSFORMERS_5)):
            need = PEFT_MIN_FOR_TRANSFORMERS_5
        if need:
            needs.append(f"transformers needs >={need}")
        if need and version_lt(peft_base, need):
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


def torchvision_check() -> Check | None:
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
    pt, pv = parse_version(torch_v or ""), parse_version(tv)
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
            problem = f"torchvision {tv} import check failed ({first_line(err)})"
    if problem is None:
        return Check("torchvision", tv)
    return Check(
        "torchvision",
        tv,
        WARN,
        f"{problem}; transformers/diffusers import it for image processors and then fail at model "
        f"import (typically 'operator torchvision::nms does not exist'). Fix: {fix}.",
    )


def torch_cuda_sdpa_check() -> Check | None:
    """torch 2.5.0 with CUDA (cuDNN attention on by default: NaN gradients on H100) warns; None otherwise."""
    torch_v = installed_version("torch")
    parsed = parse_version(torch_v or "")
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


def kernels_shadow_check() -> Check:
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
            f"a module named 'kernels' is on sys.path but breaks ({first_line(err)}); rename it.",
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
