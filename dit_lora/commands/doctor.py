"""Environment checks: installed versions, device, and known-bad package combinations.

``dit-lora doctor`` prints the full table; recipes call :func:`ensure_environment` first so
that a broken environment fails in one second with the exact ``pip install`` fix instead of
an ImportError (or a NaN) an hour into a run.

Importing this module is cheap on purpose: torch and the Hugging Face libraries are only
imported inside :func:`run_checks`, and every import there is guarded, because the doctor
must be able to report on exactly the environments in which those imports crash.

The checks live beside it: the version table (:mod:`.doctor_versions`), known-bad combinations
(:mod:`.doctor_combinations`) and the machine (:mod:`.doctor_device`); this module runs them in display order,
adds a model's tokenizer checks, and formats or enforces the result.
"""

from __future__ import annotations

import functools
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

from dit_lora.commands.doctor_combinations import (
    kernels_shadow_check,
    peft_combination_checks,
    torch_cuda_sdpa_check,
    torchvision_check,
)
from dit_lora.commands.doctor_device import compile_check, device_checks, fused_kernels_check, quantize_check
from dit_lora.commands.doctor_versions import (
    BLOCK,
    OK,
    OPTIONAL_RANGES,
    TESTED_RANGES,
    WARN,
    Check,
    first_line,
    package_check,
    python_check,
)
from dit_lora.core.errors import UserError
from dit_lora.modelfiles import tokenizer_files as tf
from dit_lora.setup.tokenizer_check import requirements


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
    checks: list[Check] = [_safe(python_check, "python")]
    for dist, spec in TESTED_RANGES.items():
        checks.append(
            _safe(functools.partial(package_check, dist, spec, optional=False, import_check=import_check), dist)
        )
    for dist, spec in OPTIONAL_RANGES.items():
        checks.append(
            _safe(functools.partial(package_check, dist, spec, optional=True, import_check=import_check), dist)
        )
    extra: list[tuple[str, Callable[[], object]]] = [
        ("device", device_checks),
        ("peft compatibility", peft_combination_checks),
        ("torchvision", torchvision_check),
        ("torch 2.5.0 + CUDA", torch_cuda_sdpa_check),
        ("kernels", kernels_shadow_check),
        ("fused kernels", fused_kernels_check),
        ("quantized base", quantize_check),
        ("compile", compile_check),
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
        return Check(name, "check failed", WARN, f"the doctor could not check this ({first_line(err)}).")


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
