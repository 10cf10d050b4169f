"""SANA-Video's fused-kernel patch points: its softmax cross-attention only.

Where Sana's points were checked against SANA-Video's blocks (diffusers 0.42.1), by fingerprint and by what the
code does:

- cross-attention (``transformer_sana_video.SanaAttnProcessor2_0``): a class of its own whose source differs from
  Sana's (fingerprint ``fcb5157be990eab5`` against ``8ef70e80b2143f99``) only in calling ``dispatch_attention_fn``
  in the ``(B, N, H, D)`` layout instead of ``scaled_dot_product_attention``: the same function (q/k norms across
  heads before the split, the key mask). Patched with Sana's processor, recorded under its own fingerprint;
  ``tests/families/sanavideo/test_kernels.py`` runs it against diffusers' forward and backward.
- self-attention (``SanaLinearAttnProcessor3_0``): not Sana's ReLU linear attention. The numerator uses the
  RoPE-rotated q and k and the denominator the unrotated ones, a function the fused ``linear_attention`` kernel
  does not compute; left on diffusers' code.
- the block (``SanaVideoTransformerBlock.forward``): its modulation is per token (``timestep`` is ``(B, N, 6D)``
  in image-to-video, each first-frame token at timestep 0) where the fused ``modulate`` and ``gated_residual``
  kernels take one row per sample, and its feed-forward is GLUMBTempConv over ``(frames, h, w)``; left on
  diffusers' code. Its LayerNorms and q/k RMSNorms get the generic points (:mod:`dit_lora.kernels.patch`).
"""

from __future__ import annotations

import functools

from dit_lora.kernels.monitor import KernelRuntime
from dit_lora.kernels.patch_points import PatchPoint
from dit_lora.kernels.processors import SoftmaxAttentionProcessor
from dit_lora.kit.patch_table import PatchTable

#: its points, on code taken from diffusers 0.42.1
SANA_VIDEO = PatchTable("sanavideo", "diffusers 0.42.1")


def cross_attention(rt: KernelRuntime, original) -> SoftmaxAttentionProcessor:
    """SANA-Video's softmax cross-attention processor: q/k norms applied across heads, before the split."""
    return SoftmaxAttentionProcessor(rt, original, qk_norm_per_head=False)


@functools.cache
def patch_points() -> tuple[PatchPoint, ...]:
    """SANA-Video's point: ``transformer_sana_video.SanaAttnProcessor2_0``."""
    from diffusers.models.transformers.transformer_sana_video import SanaAttnProcessor2_0

    return (
        SANA_VIDEO.processor("cross_attention", SanaAttnProcessor2_0, "attention", "fcb5157be990eab5", cross_attention),
    )
