"""Fused kernels and attention processors for the diffusers models dit-lora trains.

One file per op (Triton kernels, launcher, autograd Function and a PyTorch reference):
:mod:`.modulate` (LayerNorm + adaLN modulation), :mod:`.gated_residual`, :mod:`.rms_norm`,
:mod:`.linear_attention` (Sana's ReLU linear attention); :mod:`.attention` picks the softmax
attention backend. :func:`patch_model` puts them into a model, :func:`unpatch_model` takes them out,
and :mod:`.monitor` checks them against their references during training.
"""

from dit_lora.kernels.attention import ATTENTION_BACKENDS, resolve_backend
from dit_lora.kernels.defaults import KERNEL_MODES
from dit_lora.kernels.patch import KERNELS, kernel_counts, kernel_runtime, patch_model, unpatch_model

__all__ = [
    "ATTENTION_BACKENDS",
    "KERNELS",
    "KERNEL_MODES",
    "kernel_counts",
    "kernel_runtime",
    "patch_model",
    "resolve_backend",
    "unpatch_model",
]
