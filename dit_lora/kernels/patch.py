"""``patch_model`` / ``unpatch_model``: fused ops and attention processors on a diffusers model.

Patching never swaps modules or parameters, so state dicts, PEFT adapters (injected before or
after), checkpoints and ``save_lora_weights`` see the same model. It overrides ``forward`` on
module instances (deleting the override restores the class's own) and sets attention processors
(keeping the replaced one). Every override calls its ops through the model's
:class:`~dit_lora.kernels.monitor.KernelRuntime`, which can switch an op back to its reference
mid-run.

What is patched is a list of :class:`~dit_lora.kernels.patch_points.PatchPoint`: the model
family's own (``families/<name>/kernels.py``, passed as ``points``; its transformer blocks and
attention processors), then the generic ones here, which are about a library class rather than a
model and apply to any model:

========================  ====================  ==============================================
class                     kernels               what
========================  ====================  ==============================================
torch ``nn.LayerNorm``    layernorm             plain LayerNorm over the last dimension
torch ``nn.RMSNorm``      rmsnorm               RMSNorm over the last dimension (Wan's, FLUX.2's q/k norms)
diffusers ``RMSNorm``     rmsnorm               RMSNorm without a bias (Qwen-Image's, Z-Image's norms)
``AttnProcessor2_0``      attention             diffusers' default softmax attention processor
========================  ====================  ==============================================

A point whose recorded source fingerprint no longer matches the installed library is skipped, with
one line saying which class and which library version (:func:`~dit_lora.kernels.patch_points.drift_note`).
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence
from typing import cast

import torch
from torch import nn

from dit_lora.kernels.attention import resolve_backend
from dit_lora.kernels.defaults import choose_impl
from dit_lora.kernels.gated_residual import gated_residual, gated_residual_reference
from dit_lora.kernels.linear_attention import relu_linear_attention, relu_linear_attention_reference
from dit_lora.kernels.modulate import layernorm_modulate, layernorm_modulate_reference
from dit_lora.kernels.monitor import KernelRuntime
from dit_lora.kernels.patch_points import PatchPoint, drift_note, library_version
from dit_lora.kernels.processors import SoftmaxAttentionProcessor
from dit_lora.kernels.rms_norm import rms_norm, rms_norm_reference
from dit_lora.kernels.triton_launch import note_once

KERNELS = ("modulate", "gated_residual", "layernorm", "rmsnorm", "linear_attention", "attention")
_OPS: dict[str, tuple[Callable, Callable]] = {
    "modulate": (layernorm_modulate, layernorm_modulate_reference),
    "layernorm": (layernorm_modulate, layernorm_modulate_reference),
    "gated_residual": (gated_residual, gated_residual_reference),
    "rmsnorm": (rms_norm, rms_norm_reference),
    "linear_attention": (relu_linear_attention, relu_linear_attention_reference),
}
_RUNTIME = "_dit_lora_kernel_runtime"
_COUNTS = "_dit_lora_kernel_counts"
_PATCHED = "_dit_lora_patched"
_ORIGINAL_PROCESSOR = "_dit_lora_original_processor"


# ---- the generic points -------------------------------------------------------------------------
def _layernorm(self, rt: KernelRuntime, x):
    return rt.call("layernorm", x, self.weight, self.bias, None, None, self.eps)


def _torch_rmsnorm(self, rt: KernelRuntime, x):
    # ``F.rms_norm`` returns the input's dtype whatever the weight's (checked on torch 2.13); ``eps=None``
    # means the input dtype's machine epsilon there.
    eps = self.eps if self.eps is not None else torch.finfo(x.dtype).eps
    return rt.call("rmsnorm", x, self.weight, eps, x.dtype)


def _rmsnorm(self, rt: KernelRuntime, x):
    # diffusers' RMSNorm returns the weight's dtype for a half-precision weight, fp32 for an fp32 weight,
    # and the input's dtype without a weight; keep that.
    w = self.weight
    out_dtype = x.dtype if w is None else (w.dtype if w.dtype in (torch.float16, torch.bfloat16) else torch.float32)
    return rt.call("rmsnorm", x, w, self.eps, out_dtype)


def _plain_attention(module: nn.Module) -> bool:
    return getattr(module, "spatial_norm", None) is None and getattr(module, "group_norm", None) is None


def _per_head_qk_norm(rt: KernelRuntime, original) -> SoftmaxAttentionProcessor:
    return SoftmaxAttentionProcessor(rt, original, qk_norm_per_head=True)


@functools.cache
def generic_patch_points() -> tuple[PatchPoint, ...]:
    """The points that are about a library class, not a model: applied after a family's own, to any model."""
    from diffusers.models.attention_processor import AttnProcessor2_0
    from diffusers.models.normalization import RMSNorm

    return (
        PatchPoint(
            "layernorm",
            nn.LayerNorm,
            ("layernorm",),
            "d0ed1f7a9eb30e56",
            forward=_layernorm,
            when=lambda m: len(cast(nn.LayerNorm, m).normalized_shape) == 1,
            written_for="torch 2.13.0",
        ),
        PatchPoint(
            "torch_rmsnorm",
            nn.RMSNorm,
            ("rmsnorm",),
            "83bd4e912b9603f1",
            forward=_torch_rmsnorm,
            when=lambda m: len(cast(nn.RMSNorm, m).normalized_shape) == 1,
            written_for="torch 2.13.0",
        ),
        PatchPoint(
            "rmsnorm",
            RMSNorm,
            ("rmsnorm",),
            "a17b3fdc312609e3",
            forward=_rmsnorm,
            when=lambda m: getattr(m, "bias", None) is None,
            written_for="diffusers 0.42.1",
        ),
        PatchPoint(
            "attention",
            AttnProcessor2_0,
            ("attention",),
            "21a6628e8542037c",
            processor=_per_head_qk_norm,
            when=_plain_attention,
            written_for="diffusers 0.42.1",
        ),
    )


# ---- applying points ------------------------------------------------------------------------------
def _choose_ops(rt: KernelRuntime, kernels: str, wanted: dict[str, bool]) -> None:
    """Fill ``rt.ops``/``rt.impl`` with each op's implementation under ``--kernels kernels``."""
    for op, on in wanted.items():
        impl, note = choose_impl(op, rt.device, kernels) if on else ("eager", "")
        if note and note not in rt.notes:
            rt.notes.append(note)
            note_once(note, note)
        if impl == "eager":
            rt.ops[op] = (_OPS[op][1], _OPS[op][1])
            continue
        rt.impl[op] = impl
        fast = _OPS[op][0] if impl == "triton" else torch.compile(_OPS[op][1])
        rt.ops[op] = (fast, _OPS[op][1])


def _usable(point: PatchPoint, rt: KernelRuntime) -> bool:
    if point.processor is not None and point.kernels == ("attention",):
        return rt.attention_backend is not None
    return any(k in rt.impl for k in point.kernels)


def _drifted(point: PatchPoint, rt: KernelRuntime, cache: dict[str, str]) -> bool:
    """Whether ``point``'s library source changed; says so once (log and ``rt.notes``) per point."""
    if point.name not in cache:
        cache[point.name] = note = drift_note(point)
        if note:
            rt.notes.append(note)
            note_once(f"drift:{point.name}:{library_version(point.target)}", note)
    return bool(cache[point.name])


def _apply(module: nn.Module, point: PatchPoint, rt: KernelRuntime, counts: dict[str, int]) -> None:
    if point.processor is not None:
        setattr(module, _ORIGINAL_PROCESSOR, module.processor)
        module.processor = point.processor(rt, module.processor)
    else:
        assert point.forward is not None  # a PatchPoint names a processor or a forward
        module.forward = functools.partial(point.forward, module, rt)
        setattr(module, _PATCHED, point.kernels)
    for k in point.kernels:
        counts[k] += int(k in rt.impl or (k == "attention" and rt.attention_backend is not None))


def _patch_modules(model: nn.Module, points: Sequence[PatchPoint], rt: KernelRuntime) -> dict[str, int]:
    """Apply the first usable matching point to each module (a processor point first); return the counts."""
    counts = dict.fromkeys(KERNELS, 0)
    usable = [p for p in points if _usable(p, rt)]
    processors = [p for p in usable if p.processor is not None]
    forwards = [p for p in usable if p.forward is not None]
    drift: dict[str, str] = {}
    for module in model.modules():
        candidates = (processors if hasattr(module, "processor") else []) + forwards
        point = next((p for p in candidates if p.matches(module)), None)
        if point is not None and not _drifted(point, rt, drift):
            _apply(module, point, rt, counts)
    return counts


# ---- public API ---------------------------------------------------------------------------------
def patch_model(
    model: nn.Module,
    points: Sequence[PatchPoint] = (),
    *,
    kernels: str = "auto",
    modulate: bool = True,
    layernorm: bool = True,
    linear_attention: bool = True,
    attention: bool = True,
    attention_backend: str = "auto",
    flashattn: bool = True,
    check_interval: int = 0,
    device: torch.device | str | None = None,
) -> dict[str, int]:
    """Patch fused ops and attention processors into ``model``; return {kernel: modules patched}.

    ``points`` are the model family's own patch points (its ``kernel_patch_points()``); the generic
    ones (:func:`generic_patch_points`) follow them. ``kernels`` is ``auto`` (measured defaults, see
    :mod:`dit_lora.kernels.defaults`), ``on`` (every Triton kernel wherever Triton can run) or ``off``
    (nothing). The other switches mirror the recipe flags (``--disable_modulate_kernel`` is
    ``modulate=False``, and so on). A previous patch is undone first. The runtime (choices, checks,
    fallbacks) is :func:`kernel_runtime` of the model.
    """
    unpatch_model(model)
    if device is None:
        device = next((p.device for p in model.parameters()), torch.device("cpu"))
    rt = KernelRuntime(device=torch.device(device), check_interval=check_interval)
    _choose_ops(
        rt,
        kernels,
        {
            "modulate": modulate,
            "gated_residual": modulate,
            "layernorm": layernorm,
            "rmsnorm": layernorm,
            "linear_attention": linear_attention,
        },
    )
    if attention and kernels != "off":
        rt.attention_backend = resolve_backend(attention_backend, rt.device, allow_flashattn=flashattn)
        if rt.attention_backend.note:
            rt.notes.append(f"attention: {rt.attention_backend.note}")
            note_once(rt.notes[-1], rt.notes[-1])
    counts = _patch_modules(model, (*points, *generic_patch_points()), rt)
    for name, n in counts.items():
        rt.enabled[name] = n > 0
    setattr(model, _RUNTIME, rt)
    setattr(model, _COUNTS, counts)
    return counts


def unpatch_model(model: nn.Module) -> int:
    """Restore every forward and processor :func:`patch_model` replaced; return how many modules."""
    restored = 0
    for module in model.modules():
        if hasattr(module, _ORIGINAL_PROCESSOR):
            module.processor = getattr(module, _ORIGINAL_PROCESSOR)
            delattr(module, _ORIGINAL_PROCESSOR)
            restored += 1
        if _PATCHED in module.__dict__:
            module.__dict__.pop("forward", None)
            delattr(module, _PATCHED)
            restored += 1
    for attr in (_RUNTIME, _COUNTS):
        if attr in model.__dict__:
            delattr(model, attr)
    return restored


def kernel_runtime(model: nn.Module) -> KernelRuntime | None:
    """The runtime :func:`patch_model` attached to ``model`` (None when unpatched)."""
    return getattr(model, _RUNTIME, None)


def kernel_counts(model: nn.Module) -> dict[str, int]:
    """What :func:`patch_model` returned for ``model`` (empty when unpatched)."""
    return dict(getattr(model, _COUNTS, {}))
