"""Softmax attention on the best available backend, with an explicit reference beside it.

``--attention_backend`` picks what runs inside the patched attention processors:

- ``flash``: the flash-attn package (FA3's ``flash_attn_interface`` where installed, else FA2) for
  unmasked calls on CUDA; masked calls, and machines without the package, use PyTorch SDPA's
  own flash kernel (then memory-efficient, then math).
- ``cudnn`` / ``efficient``: PyTorch SDPA with that backend first, falling through to the others
  only for inputs it cannot take (e.g. a mask it does not support).
- ``sdpa``: PyTorch's own choice. ``math``: the unfused math backend (slow, exact, big).
- ``auto``: on CUDA, FA3 when installed, otherwise cuDNN first (published H100 forward figures at
  head_dim 64: FA2 324, cuDNN 413, FA3 497 TFLOP/s); on a CPU, PyTorch's own choice.

Backends switched off process-wide (the attention canary does that when a fused kernel returns
NaN) are never re-enabled here: the priority list is filtered by the global SDPA flags at each
call. ``torch.nn.functional.scaled_dot_product_attention`` is looked up at call time so the
``--inject_faults broken_attention`` drill reaches these processors too.
"""

from __future__ import annotations

import contextlib
import importlib
from collections.abc import Callable
from dataclasses import dataclass, field

import torch
from torch.nn.attention import SDPBackend, sdpa_kernel

from dit_lora.kernels.triton_launch import at_least_fp32

ATTENTION_BACKENDS = ("auto", "flash", "cudnn", "efficient", "sdpa", "math")

_FLAG_OF = {  # SDPBackend -> name of its global enable flag on torch._C
    SDPBackend.FLASH_ATTENTION: "flash",
    SDPBackend.EFFICIENT_ATTENTION: "mem_efficient",
    SDPBackend.CUDNN_ATTENTION: "cudnn",
    SDPBackend.MATH: "math",
}
_ORDERS = {
    "flash": (SDPBackend.FLASH_ATTENTION, SDPBackend.EFFICIENT_ATTENTION, SDPBackend.MATH),
    "cudnn": (SDPBackend.CUDNN_ATTENTION, SDPBackend.FLASH_ATTENTION, SDPBackend.EFFICIENT_ATTENTION, SDPBackend.MATH),
    "efficient": (SDPBackend.EFFICIENT_ATTENTION, SDPBackend.FLASH_ATTENTION, SDPBackend.MATH),
    "math": (SDPBackend.MATH,),
}


@dataclass(frozen=True)
class AttentionBackend:
    """What a patched attention processor calls: a flash-attn function and/or an SDPA priority list."""

    name: str  # what runs: flash_attn_3, flash_attn_2, cudnn, flash, efficient, sdpa or math
    requested: str
    sdpa_order: tuple[SDPBackend, ...] | None = None  # None: PyTorch's own choice
    flash_fn: Callable | None = field(default=None, compare=False)
    note: str = ""  # why the backend differs from the request, when it does


def find_flash_attn() -> tuple[str, Callable] | None:
    """The installed flash-attn entry point: FA3 (``flash_attn_interface``) before FA2, or None."""
    for name, module, attr in (
        ("flash_attn_3", "flash_attn_interface", "flash_attn_func"),
        ("flash_attn_2", "flash_attn", "flash_attn_func"),
    ):
        try:
            fn = getattr(importlib.import_module(module), attr)
        except Exception:  # missing, or built against another torch/CUDA: both mean "not usable"
            continue
        return name, fn
    return None


def resolve_backend(requested: str, device: torch.device | str, allow_flashattn: bool = True) -> AttentionBackend:
    """Turn ``--attention_backend`` (and ``--disable_flashattn``) into what will run on ``device``."""
    if requested not in ATTENTION_BACKENDS:
        raise ValueError(f"attention backend {requested!r}; choose one of {', '.join(ATTENTION_BACKENDS)}")
    cuda = torch.device(device).type == "cuda"
    flash = find_flash_attn() if (allow_flashattn and cuda) else None
    if requested == "auto":
        if not cuda:
            return AttentionBackend("sdpa", requested, note="no CUDA device: PyTorch SDPA picks its CPU kernel")
        if flash is not None and flash[0] == "flash_attn_3":
            return AttentionBackend("flash_attn_3", requested, _ORDERS["cudnn"], flash[1])
        return AttentionBackend("cudnn", requested, _ORDERS["cudnn"])
    if requested == "flash":
        if flash is not None:
            return AttentionBackend(flash[0], requested, _ORDERS["flash"], flash[1])
        why = (
            "--disable_flashattn is set"
            if not allow_flashattn
            else "no CUDA device"
            if not cuda
            else "the flash-attn package is not installed"
        )
        return AttentionBackend("flash", requested, _ORDERS["flash"], note=f"{why}: using PyTorch SDPA's flash kernel")
    if requested in ("cudnn", "efficient") and not cuda:
        return AttentionBackend("sdpa", requested, note=f"{requested} SDPA needs a CUDA device: using PyTorch's choice")
    if requested == "sdpa":
        return AttentionBackend("sdpa", requested)
    return AttentionBackend(requested, requested, _ORDERS[requested])


def fallback_backend(failed: AttentionBackend, device: torch.device | str) -> AttentionBackend:
    """The backend to switch to when ``failed`` disagreed with the reference: efficient, else math."""
    if torch.device(device).type == "cuda" and failed.name != "efficient":
        return AttentionBackend(
            "efficient", failed.requested, _ORDERS["efficient"], note=f"{failed.name} failed its check"
        )
    return AttentionBackend("math", failed.requested, _ORDERS["math"], note=f"{failed.name} failed its check")


def restore_backend(current: AttentionBackend, name: str) -> AttentionBackend:
    """The backend a checkpoint recorded as ``name``: ``current`` itself, or the fallback it moved to."""
    if name == current.name:
        return current
    if name in ("efficient", "math"):
        return AttentionBackend(name, current.requested, _ORDERS[name], note="restored from the checkpoint")
    raise ValueError(
        f"checkpoint names attention backend {name!r}, which this run cannot restore from {current.name!r}"
    )


def _enabled(backend: SDPBackend) -> bool:
    getter = getattr(torch._C, f"_get_{_FLAG_OF[backend]}_sdp_enabled", None)
    return True if getter is None else bool(getter())


def _sdpa_context(order: tuple[SDPBackend, ...] | None):
    if order is None:
        return contextlib.nullcontext()
    allowed = [b for b in order if _enabled(b)] or [SDPBackend.MATH]
    return sdpa_kernel(allowed, set_priority=True)


def attention(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, attn_mask: torch.Tensor | None, backend: AttentionBackend
) -> torch.Tensor:
    """Scaled dot-product attention of (B, H, N, D) tensors on ``backend``; returns (B, H, N, D)."""
    if (
        backend.flash_fn is not None
        and attn_mask is None
        and q.is_cuda
        and q.dtype in (torch.float16, torch.bfloat16)
        and _enabled(SDPBackend.FLASH_ATTENTION)
    ):
        out = backend.flash_fn(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2))
        if isinstance(out, tuple):  # some FA3 builds also return the log-sum-exp
            out = out[0]
        return out.transpose(1, 2)
    with _sdpa_context(backend.sdpa_order):
        return torch.nn.functional.scaled_dot_product_attention(
            q, k, v, attn_mask=attn_mask, dropout_p=0.0, is_causal=False
        )


def attention_reference(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, attn_mask: torch.Tensor | None = None
) -> torch.Tensor:
    """Softmax attention written out in fp32, or float64 for float64 inputs (the reference every backend is checked against)."""
    scale = q.shape[-1] ** -0.5
    scores = torch.matmul(at_least_fp32(q), at_least_fp32(k).transpose(-1, -2)) * scale
    if attn_mask is not None:
        if attn_mask.dtype == torch.bool:
            scores = scores.masked_fill(~attn_mask, float("-inf"))
        else:
            scores = scores + attn_mask.to(scores.dtype)
    return torch.matmul(torch.softmax(scores, dim=-1), at_least_fp32(v)).to(q.dtype)


def attention_flops(batch: int, heads: int, q_len: int, kv_len: int, head_dim: int) -> int:
    """Forward FLOPs of softmax attention (two matmuls), the figure TFLOP/s numbers are quoted in."""
    return 4 * batch * heads * q_len * kv_len * head_dim
