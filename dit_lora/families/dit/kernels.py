"""DiT's fused-kernel patch point: diffusers' ``BasicTransformerBlock`` in DiT's ``ada_norm_zero`` configuration.

The forward re-implements the branch of ``BasicTransformerBlock.forward`` that DiT runs
(class-conditioned adaLN-zero, self-attention only, LayerNorm before the feed-forward) with the
fused modulate and gated-residual ops; any other configuration of the block is left alone. DiT's
attention uses diffusers' default processor, which the generic points of
:mod:`dit_lora.kernels.patch` already cover. The point records the fingerprint of the diffusers
source it was written for (:mod:`dit_lora.kernels.patch_points`);
``tests/families/dit/test_kernels.py`` runs it against the installed diffusers block.
"""

from __future__ import annotations

import functools

from torch import nn

from dit_lora.kernels.monitor import KernelRuntime
from dit_lora.kernels.patch_points import PatchPoint
from dit_lora.kit.patch_table import PatchTable

#: its points, on code taken from diffusers 0.42.1
DIT = PatchTable("dit", "diffusers 0.42.1")


def block_forward(
    self,
    rt: KernelRuntime,
    hidden_states,
    attention_mask=None,
    encoder_hidden_states=None,
    encoder_attention_mask=None,
    timestep=None,
    cross_attention_kwargs=None,
    class_labels=None,
    added_cond_kwargs=None,
):
    """``BasicTransformerBlock.forward`` (``ada_norm_zero``, no cross-attention) with its norms and residuals fused."""
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


def is_dit_block(m: nn.Module) -> bool:
    """Whether a ``BasicTransformerBlock`` is in the configuration :func:`block_forward` implements."""
    return (
        getattr(m, "norm_type", None) == "ada_norm_zero"
        and getattr(m.norm1, "emb", None) is not None
        and m.attn2 is None
        and m.pos_embed is None
        and getattr(m, "_chunk_size", None) is None
        and not m.only_cross_attention
        and type(m.norm3) is nn.LayerNorm
        and not hasattr(m, "fuser")
    )


@functools.cache
def patch_points() -> tuple[PatchPoint, ...]:
    """DiT's point: ``BasicTransformerBlock`` with ``norm_type='ada_norm_zero'``."""
    from diffusers.models.attention import BasicTransformerBlock

    return (
        DIT.forward(
            "block", BasicTransformerBlock, "modulate gated_residual", "b00f6c306bd464b8", block_forward, is_dit_block
        ),
    )
