"""fp8 weight storage for the frozen base (``--quantize_base fp8_scaled``): e4m3 weights with per-block scales,
computed in the compute dtype, on any device (a CPU included).

Each converted ``nn.Linear`` keeps its weight as float8 e4m3 with one fp32 scale per output row and block of
:data:`BLOCK` input features (musubi-tuner's ``--fp8_scaled`` block mode, its default block size), or one per
row when ``in_features`` is not a multiple of the block: 1 byte a weight plus 4 bytes per 64, about 53% of bf16.
Every forward dequantizes the weight into the compute dtype (the autocast dtype under autocast, else the input's
dtype) and calls ``F.linear``; no fp8 matmul is used, so any GPU (and the CPU) runs it, and the arithmetic is the
unquantized model's apart from the weights' rounding (relative error at most 2**-4 of each weight, e4m3's 3
mantissa bits, or 2**-10 of its block's scale for the smallest ones).

Each scale is a power of two (the smallest at least the block's largest magnitude / 448, so that magnitude maps
into [224, 448), e4m3's top binade): where musubi-tuner divides by the magnitude / 448 itself, this costs no
precision for the normal e4m3 values (their relative error does not depend on the scale) and makes dequantizing
exact: an e4m3 value times a power of two is a bf16 (and fp32) number, so bf16 and fp32 compute see bit-identical
weights, with no second rounding (the fp32 replay of a diagnosis computes with the same weights as the run).

:class:`Fp8ScaledLinear` is an ``nn.Linear`` subclass, so PEFT's dispatch wraps it with its ordinary LoRA
``Linear`` and ``quantize.quantized_linears`` still finds it. Its ``weight`` is a read-only property returning the
dequantized weight in the dtype the layer was loaded in: PEFT's ``_move_adapter_to_device_of_base_layer`` (peft
0.21, ``tuners_utils.py``) casts a new adapter to ``base_layer.weight.dtype``, so LoRA initialises exactly as on
the unquantized base (then the run's fp32 master cast). It is not a parameter: nothing can train it, and PEFT's
``merge`` (which adds to ``weight.data``) must not be used on it.

The payload is a ``uint8`` buffer (the e4m3 bits) and the scales an ``int32`` buffer (the fp32 bits). Integer
buffers because ``model.to(torch.bfloat16)`` casts only floating tensors (fp32 scales would silently round to
bf16) and gloo, DDP's CPU backend, has no float8 type. :func:`keep_out_of_ddp` keeps them out of DDP's buffer
broadcast, which would otherwise send every fp8 weight from rank 0 at every forward (each rank converts the same
files the same way).

The backward of :class:`_Fp8Linear` dequantizes again instead of saving the dequantized weight, so a step without
gradient checkpointing keeps no compute-dtype copy of any weight alive until backward (it saves no activation
either: the input is needed only for a weight gradient, and the weight is frozen).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any, cast

import torch
import torch.nn.functional as F
from torch import nn

from dit_lora.modeling.ddp_ignore import ignore_in_ddp

#: input features per scale (musubi-tuner's default block size for --fp8_scaled)
BLOCK = 64
FP8 = torch.float8_e4m3fn
#: e4m3fn's largest finite value; beyond it a cast gives NaN (the format has no infinity), hence the clamp
FP8_MAX = float(torch.finfo(FP8).max)
#: elements quantized at once: bounds the fp32 working copy of a large layer at 64 MiB
_CHUNK = 1 << 24
#: dtypes that hold an e4m3 value times a power-of-two scale exactly (fp16's range may not: it goes via fp32)
_WIDE = (torch.bfloat16, torch.float32, torch.float64)
#: the buffers that hold a converted layer's weight
BUFFERS = ("fp8_weight", "fp8_scale")


def block_size(in_features: int) -> int:
    """Input features per scale: :data:`BLOCK`, or the whole row when ``in_features`` is not a multiple of it."""
    return BLOCK if in_features % BLOCK == 0 else in_features


def quantize_weight(
    weight: torch.Tensor, *, work_device: torch.device | str | None = None
) -> tuple[torch.Tensor, torch.Tensor]:
    """``(payload, scale_bits)`` of a 2-D ``weight``, both on ``weight``'s device.

    ``payload``: the e4m3 values as ``uint8`` ``(out, in)``; ``scale_bits``: the fp32 scales as ``int32``
    ``(out, in // block_size(in))``, each the power of two ``2**e`` with ``largest magnitude / 448 = m * 2**e``,
    ``0.5 <= m < 1`` (exact, from ``frexp``; 1 for an all-zero block). The math runs in fp32 on ``work_device``
    (default: the weight's), a bounded number of rows at a time.
    """
    out_features, in_features = weight.shape
    block = block_size(in_features)
    payload = torch.empty((out_features, in_features), dtype=torch.uint8, device=weight.device)
    scales = torch.empty((out_features, in_features // block), dtype=torch.float32, device=weight.device)
    rows = max(1, _CHUNK // max(1, in_features))
    with torch.no_grad():
        for start in range(0, out_features, rows):
            # a copy even when the weight is already fp32 there: the steps below work in place
            part = weight[start : start + rows].to(device=work_device, dtype=torch.float32, copy=True)
            part = part.reshape(part.shape[0], -1, block)
            _, exponent = torch.frexp(part.abs().amax(dim=-1, keepdim=True).div_(FP8_MAX))
            scale = torch.ldexp(torch.ones_like(exponent, dtype=torch.float32), exponent)  # frexp(0): 2**0
            # dividing by a power of two is exact; the clamp only guards the cast (e4m3fn has no infinity)
            quantized = part.div_(scale).clamp_(-FP8_MAX, FP8_MAX).to(FP8)
            payload[start : start + rows] = quantized.view(torch.uint8).reshape(-1, in_features).to(weight.device)
            scales[start : start + rows] = scale.squeeze(-1).to(weight.device)
    return payload, scales.view(torch.int32)


def dequantize(payload: torch.Tensor, scale_bits: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """The weight ``(out, in)`` in ``dtype`` from :func:`quantize_weight`'s ``payload`` and ``scale_bits``."""
    scales = scale_bits.view(torch.float32)
    work = dtype if dtype in _WIDE else torch.float32
    weight = payload.view(FP8).to(work)
    weight.view(scales.shape[0], scales.shape[1], -1).mul_(scales.to(work).unsqueeze(-1))
    return weight.to(dtype)


def dequantized_bytes(numel: int, dtype: torch.dtype) -> int:
    """Bytes a weight of ``numel`` values takes while :func:`dequantize` holds it in ``dtype`` (fp16 goes via fp32)."""
    size = torch.empty(0, dtype=dtype).element_size()
    return numel * (size if dtype in _WIDE else size + 4)


class _Fp8Linear(torch.autograd.Function):
    """``F.linear`` with a weight dequantized from fp8 on the way in, and again in backward (nothing saved but the
    layer's own buffers). The weight is frozen: gradients for the input and, when it trains, the bias."""

    @staticmethod
    def forward(ctx: Any, x: torch.Tensor, payload: torch.Tensor, scale_bits: torch.Tensor, bias):
        ctx.save_for_backward(payload, scale_bits)
        ctx.dtype = x.dtype
        return F.linear(x, dequantize(payload, scale_bits, x.dtype), bias)

    @staticmethod
    def backward(ctx: Any, *grads: torch.Tensor):
        (grad,) = grads
        payload, scale_bits = ctx.saved_tensors
        grad = grad.to(ctx.dtype)
        grad_x = grad @ dequantize(payload, scale_bits, ctx.dtype) if ctx.needs_input_grad[0] else None
        grad_bias = grad.reshape(-1, grad.shape[-1]).sum(0) if ctx.needs_input_grad[3] else None
        return grad_x, None, None, grad_bias


class Fp8ScaledLinear(nn.Linear):
    """A frozen ``nn.Linear`` whose weight is stored in fp8 e4m3 with per-block fp32 scales (see the module doc).

    ``weight_dtype`` is the dtype the layer was loaded in; ``weight`` (read-only) dequantizes into it, and a
    ``.to(dtype)`` / ``.half()`` of the model changes it as it would an ``nn.Linear``'s weight, leaving the fp8
    payload and scales bit for bit. The bias stays an ordinary parameter (it may train).
    """

    fp8_weight: torch.Tensor  # buffers, declared for the type checker (Module.__getattr__ says Tensor | Module)
    fp8_scale: torch.Tensor

    def __init__(
        self,
        in_features: int,
        out_features: int,
        payload: torch.Tensor,
        scale_bits: torch.Tensor,
        bias: nn.Parameter | None,
        weight_dtype: torch.dtype,
    ) -> None:
        nn.Module.__init__(self)  # not nn.Linear's: it would allocate a weight parameter
        self.in_features, self.out_features = in_features, out_features
        self.weight_dtype = weight_dtype
        self.register_buffer("fp8_weight", payload)
        self.register_buffer("fp8_scale", scale_bits)
        self.register_parameter("bias", bias)

    @classmethod
    def from_linear(cls, linear: nn.Linear, *, work_device: torch.device | str | None = None) -> Fp8ScaledLinear:
        """``linear`` quantized (its bias parameter and train/eval mode kept, the object itself not changed)."""
        weight = linear.weight.detach()
        if not weight.is_floating_point() or weight.element_size() < 2 or weight.dim() != 2:
            raise TypeError(
                f"fp8_scaled converts 16/32-bit nn.Linear weights, not a {weight.dtype} {tuple(weight.shape)}"
            )
        payload, scale_bits = quantize_weight(weight, work_device=work_device)
        layer = cls(linear.in_features, linear.out_features, payload, scale_bits, linear.bias, weight.dtype)
        return layer.train(linear.training)

    @property
    def weight(self) -> torch.Tensor:  # type: ignore[override]  # nn.Linear's is a settable Parameter; derived here
        """The dequantized weight in ``weight_dtype`` (a new tensor each call, not a parameter)."""
        return self.dequantize(self.weight_dtype)

    def dequantize(self, dtype: torch.dtype | None = None) -> torch.Tensor:
        """The weight ``(out, in)`` in ``dtype`` (default ``weight_dtype``)."""
        return dequantize(self.fp8_weight, self.fp8_scale, dtype or self.weight_dtype)

    def forward(self, input: torch.Tensor) -> torch.Tensor:
        """``F.linear`` in the compute dtype: autocast's while it is on for ``input``'s device, else ``input``'s."""
        device = input.device.type
        dtype = torch.get_autocast_dtype(device) if torch.is_autocast_enabled(device) else input.dtype
        bias = None if self.bias is None else self.bias.to(dtype)
        return cast(torch.Tensor, _Fp8Linear.apply(input.to(dtype), self.fp8_weight, self.fp8_scale, bias))

    def _apply(self, fn, recurse=True):
        # A model-wide cast (`.to(dtype)`, `.half()`) reaches only floating tensors; the dtype it would give a
        # floating weight is read from an empty one, so `weight` and PEFT follow it as for an nn.Linear.
        self.weight_dtype = fn(torch.empty(0, dtype=self.weight_dtype, device=self.fp8_weight.device)).dtype
        return super()._apply(fn, recurse)

    def extra_repr(self) -> str:
        return (
            f"in_features={self.in_features}, out_features={self.out_features}, bias={self.bias is not None}, "
            f"fp8 e4m3 with a scale per {block_size(self.in_features)} inputs, computed like {self.weight_dtype}"
        )


def convert(model: nn.Module, names: Iterable[str], *, work_device: torch.device | str | None = None) -> int:
    """Replace the ``nn.Linear`` modules ``names`` of ``model`` in place by :class:`Fp8ScaledLinear`; returns how
    many were converted (already converted ones are skipped).

    One layer at a time: the original layer is dropped from the model before the next is converted, so its weight
    is freed then (unless something else holds it, e.g. a tied weight) and the peak is one layer above the fp8
    model. ``work_device`` (e.g. the GPU the model goes to next) runs the quantization math; the fp8 weights stay
    where the originals were.
    """
    count = 0
    for name in names:
        parent_name, _, child_name = name.rpartition(".")
        parent = model.get_submodule(parent_name)
        linear = parent.get_submodule(child_name)
        if isinstance(linear, Fp8ScaledLinear):
            continue
        if not isinstance(linear, nn.Linear):
            raise TypeError(f"`{name}` is a {type(linear).__name__}, not an nn.Linear")
        parent.register_module(child_name, Fp8ScaledLinear.from_linear(linear, work_device=work_device))
        del linear  # this function's last reference: the original weight goes now, not after the last layer
        count += 1
    return count


def release_mapped_files(model: nn.Module) -> int:
    """Give every CPU parameter and buffer of ``model`` but the fp8 ones memory of its own; returns how many.

    diffusers and transformers load safetensors on a CPU as views of one memory-mapped file. After :func:`convert`
    the tensors left (biases, norms, embeddings) are still such views, and while one lives, the file's pages the
    conversion read (every original weight) stay resident: on a CPU run they were the peak's largest part until the
    end (``benchmarks/plan/vs_cpu_runs_fp8.json``). Once they are copied the mapping goes, and those pages with it.
    """
    fresh = {id(t) for m in model.modules() if isinstance(m, Fp8ScaledLinear) for t in (m.fp8_weight, m.fp8_scale)}
    count = 0
    with torch.no_grad():
        for tensor in (*model.parameters(), *model.buffers()):
            if id(tensor) not in fresh and tensor.device.type == "cpu":
                tensor.data = tensor.data.clone()
                count += 1
    return count


def fp8_layers(model: nn.Module) -> list[str]:
    """Names of the :class:`Fp8ScaledLinear` modules of ``model``."""
    return [name for name, module in model.named_modules() if isinstance(module, Fp8ScaledLinear)]


def keep_out_of_ddp(model: nn.Module) -> int:
    """Name the fp8 buffers of ``model`` in ``_ddp_params_and_buffers_to_ignore`` (read by DDP when it wraps
    ``model``), so DDP neither broadcasts them at start nor at every forward; returns how many buffers. Call it on
    the module handed to DDP, after LoRA is attached (PEFT's wrappers change the names)."""
    names = [f"{layer}.{buffer}" if layer else buffer for layer in fp8_layers(model) for buffer in BUFFERS]
    ignore_in_ddp(model, names)
    return len(names)


__all__ = [
    "BLOCK",
    "Fp8ScaledLinear",
    "block_size",
    "convert",
    "dequantize",
    "dequantized_bytes",
    "fp8_layers",
    "keep_out_of_ddp",
    "quantize_weight",
    "release_mapped_files",
]
