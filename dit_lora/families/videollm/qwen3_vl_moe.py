"""Qwen3-VL MoE (``Qwen3VLMoeForConditionalGeneration``: ``Qwen/Qwen3-VL-30B-A3B-Instruct``,
``Qwen/Qwen3-VL-235B-A22B-Instruct``) as a :class:`~dit_lora.families.videollm.architecture.VideoLLMSpec`.

Everything but the language model's MLPs is the dense Qwen3-VL's (:class:`~dit_lora.families.videollm.qwen3_vl.
Qwen3VLSpec`): the tower and its DeepStack mergers, the video processor's pixels, the per-patch ``<t seconds>``
prompt from the decoded frames' times, the ``mm_token_type_ids`` hook. Each decoder layer's MLP is a sparse block
(transformers 5.x)::

    model.language_model.layers.N.self_attn.{q,k,v,o}_proj   nn.Linear: LoRA, as in the dense model
    model.language_model.layers.N.mlp.gate                   the router (Qwen3VLMoeTextTopKRouter, a bare weight)
    model.language_model.layers.N.mlp.experts.gate_up_proj   nn.Parameter (experts, 2 x moe_intermediate, hidden)
    model.language_model.layers.N.mlp.experts.down_proj      nn.Parameter (experts, hidden, moe_intermediate)

**What trains.** LoRA on the attention projections (the inherited ``lora_projections`` find no ``nn.Linear`` named
gate/up/down_proj inside a sparse block: the experts are fused 3-D parameters, not layers); the router stays frozen
(it is no ``nn.Linear`` either, and a LoRA on routing would move which experts see which token). LoRA on the fused
experts through PEFT's ``target_parameters`` works in PEFT 0.21 on the tiny model (forward, backward), but dit-lora's
adapter code passes module names only, so it is not offered: the guide says so.

**No router loss.** ``Qwen3VLMoeForConditionalGeneration`` adds ``router_aux_loss_coef x`` its load-balancing loss
to ``loss`` only with ``output_router_logits``; the published configs leave it off, and LLaMA-Factory's
``configure_moe`` does not switch it on for ``qwen3_vl_moe`` (its list names qwen3_moe, not this model). With the
router frozen the balance it trains is not LoRA's to keep, so :meth:`load_model` turns it off whatever the folder's
config says: the plain loss and Liger's fused one are then the same answer-token cross-entropy.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, cast

import torch

from dit_lora.families.videollm.qwen3_vl import Qwen3VLSpec

if TYPE_CHECKING:
    from transformers import PreTrainedConfig

__all__ = ["Qwen3VLMoeSpec"]


class Qwen3VLMoeSpec(Qwen3VLSpec):
    """Qwen3-VL MoE: the dense Qwen3-VL's tower, frames and prompt; LoRA on the sparse language model's attention."""

    name = "qwen3_vl_moe"
    model_class = "Qwen3VLMoeForConditionalGeneration"
    liger_patch = "qwen3_vl_moe"  # apply_liger_kernel_to_qwen3_vl_moe: RMSNorm (q/k norms too) and RoPE
    liger_swiglu = False  # the experts are fused parameters: Liger's MoE patch replaces no MLP

    def load_model(
        self, path: str | Path, dtype: torch.dtype = torch.bfloat16, quantization_config=None
    ) -> torch.nn.Module:
        """The dense spec's loader, with the router's load-balancing loss off (module docstring: no router loss)."""
        model = super().load_model(path, dtype, quantization_config)
        config = cast("PreTrainedConfig", model.config)  # a transformers model's (nn.Module does not name it)
        text = getattr(config, "text_config", config)
        text.output_router_logits = False  # a folder's config asking for it would add a loss the router cannot act on
        return model
