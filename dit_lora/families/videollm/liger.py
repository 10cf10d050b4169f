"""``--use_liger_kernel``: Liger-Kernel on the language model, or a clear note and the plain path.

Liger's Triton kernels need a CUDA GPU. Where they can run, the language model's RMSNorm, SwiGLU
and RoPE are patched in place (``apply_liger_kernel_to_<model_type>(model=...)``, chosen by the
language model's ``model_type``: Mistral for VideoChat2-style LLaVA-NeXT-Video, Qwen2.5-VL's own)
and the loss becomes Liger's fused linear cross-entropy on the last hidden states, which never
materialises the (tokens x vocabulary) logits. :func:`hidden_state_loss` is the same computation in
plain PyTorch; a test holds it equal to the model's own loss, so the fused path computes the loss
the model would.
"""

from __future__ import annotations

import importlib.util
from collections.abc import Callable
from typing import TYPE_CHECKING, cast

import torch
import torch.nn.functional as F

if TYPE_CHECKING:
    from transformers import PreTrainedConfig

IGNORE_INDEX = -100


def plain_loss(spec, model, inputs: dict, labels: torch.Tensor) -> torch.Tensor:
    """The model's own causal-LM loss (mean over answer tokens; prompt and video tokens are -100)."""
    return model(**inputs, labels=labels).loss


def _shifted(hidden: torch.Tensor, labels: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    h = hidden[:, :-1].reshape(-1, hidden.shape[-1])
    y = labels[:, 1:].reshape(-1).to(h.device)
    return h, y


def hidden_state_loss(
    spec, model, inputs: dict, labels: torch.Tensor, linear_ce: Callable | None = None
) -> torch.Tensor:
    """Loss from the last hidden states and the LM head: ``linear_ce(weight, hidden, target)`` or plain CE.

    ``model`` may be wrapped for data parallelism: the forward goes through the wrapper (DDP
    synchronises gradients only for a forward it ran), asking for the hidden states and the logits of
    one position only; the LM head's weight is read from the model inside.
    """
    from accelerate.utils import extract_model_from_parallel

    out = model(**inputs, output_hidden_states=True, logits_to_keep=1)
    hidden = out.hidden_states[-1]  # transformers ties it to the final (normed) hidden state
    h, y = _shifted(hidden, labels)
    weight = extract_model_from_parallel(model).get_output_embeddings().weight
    if linear_ce is not None:
        return linear_ce(weight, h, y)
    return F.cross_entropy(F.linear(h, weight).float(), y, ignore_index=IGNORE_INDEX)


def liger_unavailable_reason(device: torch.device) -> str | None:
    """Why Liger cannot run here, or None when it can."""
    if importlib.util.find_spec("liger_kernel") is None:
        return "Liger-Kernel is not installed (`pip install liger-kernel`)"
    if device.type != "cuda":
        return "Liger-Kernel's Triton kernels need a CUDA GPU"
    return None


def apply_liger(spec, model: torch.nn.Module, log: Callable[[str], object]):
    """Patch the language model with Liger and return the fused loss function, or None (after a note)."""
    device = next(model.parameters()).device
    reason = liger_unavailable_reason(device)
    model_config = cast("PreTrainedConfig", model.config)  # a transformers model's (nn.Module does not name it)
    config = getattr(model_config, "text_config", model_config)
    if reason is None:
        import liger_kernel.transformers as liger

        name = spec.liger_patch or config.model_type  # Qwen3-VL's patch is named by the whole model
        patch = getattr(liger, f"apply_liger_kernel_to_{name}", None)
        if patch is None:
            reason = f"Liger-Kernel has no kernels for a {name!r} language model"
    if reason is not None:
        log(f"note: --use_liger_kernel: {reason}; training on the plain PyTorch path.")
        return None
    assert patch is not None  # no reason was given: Liger imported and has this model's patch
    patch(
        rope=True,
        rms_norm=True,
        swiglu=spec.liger_swiglu,
        cross_entropy=False,
        fused_linear_cross_entropy=False,
        model=spec.module(model, spec.language_model),
    )
    fused = liger.LigerFusedLinearCrossEntropyLoss(ignore_index=IGNORE_INDEX)
    kernels = "RMSNorm, SwiGLU, RoPE" if spec.liger_swiglu else "RMSNorm, RoPE"
    log(f"Liger-Kernel applied to the {name} language model ({kernels}, fused linear cross-entropy).")

    def liger_loss(spec, model, inputs, labels):
        return hidden_state_loss(spec, model, inputs, labels, linear_ce=fused)

    return liger_loss
