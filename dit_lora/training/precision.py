"""Precision audit after loading: every tensor whose dtype differs from the policy, and the fp16 refusal.

The policy is :func:`dit_lora.contract.spec.expected_dtypes` (component name -> dtype of its floating
parameters and buffers). Trainable parameters are checked against ``trainable_dtype`` (fp32
master weights) instead; integer and bool buffers are ignored, and floating buffers may also be
fp32 or fp64 (rotary frequencies, CogVideoX-2B's sin-cos position table: kept wide on purpose and cast
at forward), so only a buffer in another reduced precision than the policy is reported. Modules a model lists in
``_keep_in_fp32_modules`` (diffusers/transformers convention) are expected in fp32.
"""

from __future__ import annotations

from collections import OrderedDict
from typing import Any

import torch

from dit_lora.core.errors import UserError

__all__ = ["audit_precision", "check_fp16_model", "format_audit"]

_FIRST_NAMES = 3  # names shown per group in the audit summary


def _name(dtype: torch.dtype | str) -> str:
    return str(dtype).replace("torch.", "")


def _components(comps) -> list[tuple[str, Any]]:
    out = [("model", comps.model)]
    out += [(name, mod) for name, mod in (comps.encoders or {}).items()]
    return [(n, m) for n, m in out if isinstance(m, torch.nn.Module)]


def _keep_fp32(module: torch.nn.Module) -> tuple[str, ...]:
    keep = getattr(module, "_keep_in_fp32_modules", None) or ()
    return tuple(keep)


def _in_keep(name: str, keep: tuple[str, ...]) -> bool:
    parts = name.split(".")
    return any(k in parts or f".{k}." in f".{name}." for k in keep)


def audit_precision(
    comps, policy: dict[str, torch.dtype], *, trainable_dtype: torch.dtype = torch.float32, allow_fp16: bool
) -> list[dict]:
    """Every parameter/buffer of the components in ``policy`` whose dtype differs from it.

    Each mismatch: ``{"component", "name", "kind": "param"|"buffer", "dtype", "expected", "trainable"}``
    (dtypes as short names, e.g. ``"bfloat16"``). Trainable parameters must be ``trainable_dtype``.
    Without ``allow_fp16``, fp16 frozen weights are reported even where the policy says fp16 (the
    run refuses fp16 without ``--allow_fp16``). Components absent from ``comps`` (e.g. encoders
    already released) are skipped.
    """
    mismatches: list[dict] = []
    for comp_name, module in _components(comps):
        if comp_name not in policy:
            continue
        expected = policy[comp_name]
        keep = _keep_fp32(module)
        for name, p in module.named_parameters():
            if not p.is_floating_point():
                continue
            if p.requires_grad:
                want = trainable_dtype
            elif keep and _in_keep(name, keep):
                want = torch.float32
            else:
                want = expected
            flagged = p.dtype != want or (not allow_fp16 and not p.requires_grad and p.dtype == torch.float16)
            if flagged:
                shown = _name(want) if p.dtype != want else f"{_name(want)} (fp16 needs --allow_fp16)"
                mismatches.append(
                    {
                        "component": comp_name,
                        "name": name,
                        "kind": "param",
                        "dtype": _name(p.dtype),
                        "expected": shown,
                        "trainable": bool(p.requires_grad),
                    }
                )
        for name, b in module.named_buffers():
            if b is None or not b.is_floating_point():
                continue
            want = torch.float32 if keep and _in_keep(name, keep) else expected
            # fp32 buffers (rotary inv_freq and the like) are kept in fp32 on purpose by transformers/diffusers,
            # and fp64 ones (CogVideoX-2B's sin-cos pos_embedding) are cast to the activations' dtype at forward.
            if b.dtype != want and b.dtype not in (torch.float32, torch.float64):
                mismatches.append(
                    {
                        "component": comp_name,
                        "name": name,
                        "kind": "buffer",
                        "dtype": _name(b.dtype),
                        "expected": _name(want),
                        "trainable": False,
                    }
                )
    return mismatches


def format_audit(mismatches: list[dict]) -> str:
    """A short summary grouped by component, kind and dtype (count + first names), not one line per tensor."""
    if not mismatches:
        return "precision audit: every parameter and buffer matches the precision policy."
    groups: OrderedDict[tuple, list[str]] = OrderedDict()
    for m in mismatches:
        kind = "trainable param" if m.get("trainable") else m["kind"]
        groups.setdefault((m["component"], kind, m["dtype"], m["expected"]), []).append(m["name"])
    lines = [f"precision audit: {len(mismatches)} tensor(s) differ from the precision policy:"]
    for (comp, kind, dtype, expected), names in groups.items():
        more = f" and {len(names) - _FIRST_NAMES} more" if len(names) > _FIRST_NAMES else ""
        lines.append(
            f"  {comp}: {len(names)} {kind}(s) in {dtype}, expected {expected}: {', '.join(names[:_FIRST_NAMES])}{more}"
        )
    return "\n".join(lines)


def check_fp16_model(model: torch.nn.Module, allow_fp16: bool) -> None:
    """Refuse a model (denoiser or language model) whose frozen weights are (mostly) fp16 unless ``allow_fp16``."""
    floating = [p for p in model.parameters() if p.is_floating_point()]
    frozen = [p for p in floating if not p.requires_grad] or floating  # not frozen yet: judge all of them
    sizes: dict[torch.dtype, int] = {}
    for p in frozen:
        sizes[p.dtype] = sizes.get(p.dtype, 0) + p.numel()
    if not sizes or allow_fp16:
        return
    total = sum(sizes.values())
    fp16 = sizes.get(torch.float16, 0)
    if fp16 and fp16 * 2 >= total:
        raise UserError(
            f"The model's frozen weights are fp16 ({fp16:,} of {total:,} values). fp16 overflows past 65504, "
            "which is behind most NaN reports for Sana and VideoChat2 fine-tunes, so dit-lora refuses it by "
            "default. Better: use --mixed_precision bf16 with a BF16 checkpoint (e.g. "
            "Efficient-Large-Model/Sana_1600M_1024px_BF16_diffusers; for an fp16-trained checkpoint use its "
            "BF16 release rather than casting). To train in fp16 anyway, add --allow_fp16."
        )
