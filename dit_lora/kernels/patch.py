"""``patch_model`` / ``unpatch_model``: fused ops and attention processors on a diffusers model.

Patching never swaps modules or parameters, so state dicts, PEFT adapters (injected before or
after), checkpoints and ``save_lora_weights`` see the same model. It overrides ``forward`` on
module instances (deleting the override restores the class's own) and sets attention processors
(keeping the replaced one). Every override calls its ops through the model's
:class:`~dit_lora.kernels.monitor.KernelRuntime`, which can switch an op back to its reference
mid-run. What is patched is decided by module class, never by model family:

========================  ====================  ==============================================
module                    kernels               where
========================  ====================  ==============================================
CogVideoXLayerNormZero    modulate              CogVideoX norm1/norm2 (text and video streams)
CogVideoXBlock            gated_residual        CogVideoX residual adds
SanaTransformerBlock      modulate, gated_res.  Sana's adaLN-single blocks
BasicTransformerBlock     modulate, gated_res.  DiT (``ada_norm_zero``, self-attention only)
nn.LayerNorm              layernorm             e.g. CogVideoX's per-head q/k norms
diffusers RMSNorm         rmsnorm               e.g. Sana's q/k norms where the checkpoint has them
Attention processors      attention             CogVideoX joint, Sana cross, DiT self-attention
SanaLinearAttnProcessor   linear_attention      Sana's ReLU linear self-attention
========================  ====================  ==============================================
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import Callable

import torch
from torch import nn

from .attention import resolve_backend
from .defaults import choose_impl
from .gated_residual import gated_residual, gated_residual_reference
from .linear_attention import relu_linear_attention, relu_linear_attention_reference
from .modulate import layernorm_modulate, layernorm_modulate_reference
from .monitor import KernelRuntime
from .processors import JointAttentionProcessor, LinearAttentionProcessor, SoftmaxAttentionProcessor
from .rms_norm import rms_norm, rms_norm_reference
from .triton_launch import note_once

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


# ---- replacement forwards ----------------------------------------------------------------------
def _cogvideox_norm_zero(self, rt: KernelRuntime, hidden_states, encoder_hidden_states, temb):
    shift, scale, gate, enc_shift, enc_scale, enc_gate = self.linear(self.silu(temb)).chunk(6, dim=1)
    n = self.norm
    hidden_states = rt.call("modulate", hidden_states, n.weight, n.bias, scale, shift, n.eps)
    encoder_hidden_states = rt.call("modulate", encoder_hidden_states, n.weight, n.bias, enc_scale, enc_shift, n.eps)
    return hidden_states, encoder_hidden_states, gate[:, None, :], enc_gate[:, None, :]


def _cogvideox_block(self, rt: KernelRuntime, hidden_states, encoder_hidden_states, temb, image_rotary_emb=None,
                     attention_kwargs=None):
    text_len = encoder_hidden_states.size(1)
    norm_x, norm_ctx, gate_x, gate_ctx = self.norm1(hidden_states, encoder_hidden_states, temb)
    attn_x, attn_ctx = self.attn1(hidden_states=norm_x, encoder_hidden_states=norm_ctx,
                                  image_rotary_emb=image_rotary_emb, **(attention_kwargs or {}))
    hidden_states = rt.call("gated_residual", hidden_states, gate_x, attn_x)
    encoder_hidden_states = rt.call("gated_residual", encoder_hidden_states, gate_ctx, attn_ctx)
    norm_x, norm_ctx, gate_x, gate_ctx = self.norm2(hidden_states, encoder_hidden_states, temb)
    ff = self.ff(torch.cat([norm_ctx, norm_x], dim=1))
    hidden_states = rt.call("gated_residual", hidden_states, gate_x, ff[:, text_len:])
    encoder_hidden_states = rt.call("gated_residual", encoder_hidden_states, gate_ctx, ff[:, :text_len])
    return hidden_states, encoder_hidden_states


def _sana_block(self, rt: KernelRuntime, hidden_states, attention_mask=None, encoder_hidden_states=None,
                encoder_attention_mask=None, timestep=None, height=None, width=None):
    batch = hidden_states.shape[0]
    # (B, 6, D) -> six per-sample (B, D) rows, the layout every op takes
    shift_msa, scale_msa, gate_msa, shift_mlp, scale_mlp, gate_mlp = (
        self.scale_shift_table[None] + timestep.reshape(batch, 6, -1)).unbind(dim=1)
    n1, n2 = self.norm1, self.norm2
    norm_x = rt.call("modulate", hidden_states, n1.weight, n1.bias, scale_msa, shift_msa, n1.eps)
    hidden_states = rt.call("gated_residual", hidden_states, gate_msa, self.attn1(norm_x.to(hidden_states.dtype)))
    if self.attn2 is not None:
        hidden_states = self.attn2(hidden_states, encoder_hidden_states=encoder_hidden_states,
                                   attention_mask=encoder_attention_mask) + hidden_states
    norm_x = rt.call("modulate", hidden_states, n2.weight, n2.bias, scale_mlp, shift_mlp, n2.eps)
    ff = self.ff(norm_x.unflatten(1, (height, width)).permute(0, 3, 1, 2)).flatten(2, 3).permute(0, 2, 1)
    return rt.call("gated_residual", hidden_states, gate_mlp, ff)


def _dit_block(self, rt: KernelRuntime, hidden_states, attention_mask=None, encoder_hidden_states=None,
               encoder_attention_mask=None, timestep=None, cross_attention_kwargs=None, class_labels=None,
               added_cond_kwargs=None):
    n1, n3 = self.norm1, self.norm3
    emb = n1.emb(timestep, class_labels, hidden_dtype=hidden_states.dtype)
    shift_msa, scale_msa, gate_msa, shift_mlp, scale_mlp, gate_mlp = n1.linear(n1.silu(emb)).chunk(6, dim=1)
    norm_x = rt.call("modulate", hidden_states, n1.norm.weight, n1.norm.bias, scale_msa, shift_msa, n1.norm.eps)
    kwargs = dict(cross_attention_kwargs or {})
    kwargs.pop("scale", None)
    attn = self.attn1(norm_x, encoder_hidden_states=None, attention_mask=attention_mask, **kwargs)
    hidden_states = rt.call("gated_residual", hidden_states, gate_msa, attn)
    norm_x = rt.call("modulate", hidden_states, n3.weight, n3.bias, scale_mlp, shift_mlp, n3.eps)
    return rt.call("gated_residual", hidden_states, gate_mlp, self.ff(norm_x))


def _layernorm(self, rt: KernelRuntime, x):
    return rt.call("layernorm", x, self.weight, self.bias, None, None, self.eps)


def _rmsnorm(self, rt: KernelRuntime, x):
    # diffusers' RMSNorm returns the weight's dtype for a half-precision weight, fp32 for an fp32 weight,
    # and the input's dtype without a weight; keep that.
    w = self.weight
    out_dtype = x.dtype if w is None else (w.dtype if w.dtype in (torch.float16, torch.bfloat16) else torch.float32)
    return rt.call("rmsnorm", x, w, self.eps, out_dtype)


# ---- which module gets what -------------------------------------------------------------------
def _named(module: nn.Module, *names: str) -> bool:
    return type(module).__name__ in names


def _is_dit_block(m: nn.Module) -> bool:
    return (_named(m, "BasicTransformerBlock") and getattr(m, "norm_type", None) == "ada_norm_zero"
            and getattr(m.norm1, "emb", None) is not None
            and m.attn2 is None and m.pos_embed is None and getattr(m, "_chunk_size", None) is None
            and not m.only_cross_attention and type(m.norm3) is nn.LayerNorm and not hasattr(m, "fuser"))


def _is_sana_block(m: nn.Module) -> bool:
    return _named(m, "SanaTransformerBlock") and hasattr(m, "norm2") and type(m.norm1) is nn.LayerNorm


@dataclass(frozen=True)
class _ForwardPatch:
    kernels: tuple[str, ...]
    matches: Callable[[nn.Module], bool]
    forward: Callable


_FORWARD_PATCHES = (
    _ForwardPatch(("modulate",), lambda m: _named(m, "CogVideoXLayerNormZero") and type(m.norm) is nn.LayerNorm,
                  _cogvideox_norm_zero),
    _ForwardPatch(("gated_residual",), lambda m: _named(m, "CogVideoXBlock"), _cogvideox_block),
    _ForwardPatch(("modulate", "gated_residual"), _is_sana_block, _sana_block),
    _ForwardPatch(("modulate", "gated_residual"), _is_dit_block, _dit_block),
    _ForwardPatch(("layernorm",), lambda m: type(m) is nn.LayerNorm and len(m.normalized_shape) == 1, _layernorm),
    _ForwardPatch(("rmsnorm",), lambda m: _named(m, "RMSNorm") and type(m).__module__.startswith("diffusers")
                  and getattr(m, "bias", None) is None, _rmsnorm),
)


def _processor_for(module: nn.Module, rt: KernelRuntime):
    """(kernel, replacement processor) for an attention module, or None when it is left alone."""
    proc = getattr(module, "processor", None)
    name = type(proc).__name__
    if name == "CogVideoXAttnProcessor2_0":
        return "attention", JointAttentionProcessor(rt, proc)
    if name == "SanaAttnProcessor2_0":
        return "attention", SoftmaxAttentionProcessor(rt, proc, qk_norm_per_head=False)
    if name == "AttnProcessor2_0" and getattr(module, "spatial_norm", None) is None \
            and getattr(module, "group_norm", None) is None:
        return "attention", SoftmaxAttentionProcessor(rt, proc, qk_norm_per_head=True)
    if name == "SanaLinearAttnProcessor2_0":
        return "linear_attention", LinearAttentionProcessor(rt, proc)
    return None


# ---- public API ---------------------------------------------------------------------------------
def patch_model(model: nn.Module, *, kernels: str = "auto", modulate: bool = True, layernorm: bool = True,
                linear_attention: bool = True, attention: bool = True, attention_backend: str = "auto",
                flashattn: bool = True, check_interval: int = 0, device: torch.device | str | None = None
                ) -> dict[str, int]:
    """Patch fused ops and attention processors into ``model``; return {kernel: modules patched}.

    ``kernels`` is ``auto`` (measured defaults, see :mod:`dit_lora.kernels.defaults`), ``on`` (every
    Triton kernel wherever Triton can run) or ``off`` (nothing). The other switches mirror the recipe
    flags (``--disable_modulate_kernel`` is ``modulate=False``, and so on). A previous patch is undone
    first. The runtime (choices, checks, fallbacks) is :func:`kernel_runtime` of the model.
    """
    unpatch_model(model)
    if device is None:
        device = next((p.device for p in model.parameters()), torch.device("cpu"))
    rt = KernelRuntime(device=torch.device(device), check_interval=check_interval)
    counts = dict.fromkeys(KERNELS, 0)
    wanted = {"modulate": modulate, "gated_residual": modulate, "layernorm": layernorm, "rmsnorm": layernorm,
              "linear_attention": linear_attention}
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
    if attention and kernels != "off":
        rt.attention_backend = resolve_backend(attention_backend, rt.device, allow_flashattn=flashattn)
        if rt.attention_backend.note:
            rt.notes.append(f"attention: {rt.attention_backend.note}")
            note_once(rt.notes[-1], rt.notes[-1])
    for module in model.modules():
        proc = _processor_for(module, rt) if hasattr(module, "processor") else None
        if proc is not None and (proc[0] in rt.impl or (proc[0] == "attention" and rt.attention_backend)):
            setattr(module, _ORIGINAL_PROCESSOR, module.processor)
            module.processor = proc[1]
            counts[proc[0]] += 1
            continue
        for patch in _FORWARD_PATCHES:
            if any(k in rt.impl for k in patch.kernels) and patch.matches(module):
                module.forward = functools.partial(patch.forward, module, rt)
                setattr(module, _PATCHED, patch.kernels)
                for k in patch.kernels:
                    counts[k] += int(k in rt.impl)
                break
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
