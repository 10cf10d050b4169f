"""What this machine runs: the device and bf16, the fused kernels and attention backend, the quantized base's
schemes and ``--compile``. torch and dit-lora's kernels are imported inside each check, so a broken torch install is
reported rather than failing the doctor's import.
"""

from __future__ import annotations

from dit_lora.commands.doctor_versions import OK, WARN, Check, first_line, installed_version
from dit_lora.core.errors import UserError


def device_checks() -> list[Check]:
    """Device name/count and bf16 support; tolerant of a missing or broken torch."""
    try:
        import torch
    except BaseException as err:
        return [Check("device", "unknown", WARN, f"torch does not import ({first_line(err)}).")]
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
                f"querying the device failed ({first_line(err)}); check the NVIDIA driver (nvidia-smi).",
            )
        )
    return checks


def fused_kernels_check() -> Check:
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


def quantize_check() -> Check:
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


def compile_check() -> Check:
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
