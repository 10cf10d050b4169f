"""Qwen3-VL MoE (``Qwen3VLMoeForConditionalGeneration``: ``Qwen/Qwen3-VL-30B-A3B-Instruct``,
``Qwen/Qwen3-VL-235B-A22B-Instruct``): what its :class:`~dit_lora.families.videollm.qwen3_vl.Qwen3VLSpec`
(``Qwen3VLSpec(sparse=True)``) changes in the dense one's.

Everything but the language model's MLPs is the dense Qwen3-VL's: the tower and its DeepStack mergers, the video processor's pixels, the per-patch ``<t seconds>``
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
router frozen the balance it trains is not LoRA's to keep, so the spec's ``load_model`` turns it off
(:func:`without_router_loss`) whatever the folder's config says: the plain loss and Liger's fused one are then the same answer-token cross-entropy.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, cast

import torch

if TYPE_CHECKING:
    from transformers import PreTrainedConfig

__all__ = ["LIGER_PATCH", "MODEL_CLASS", "NAME", "without_router_loss"]

#: the family name of the MoE checkpoints
NAME = "qwen3_vl_moe"
#: the transformers class they load as
MODEL_CLASS = "Qwen3VLMoeForConditionalGeneration"
#: apply_liger_kernel_to_qwen3_vl_moe: RMSNorm (q/k norms too) and RoPE (the experts are fused parameters: Liger's
#: MoE patch replaces no MLP, so no SwiGLU, as for the dense model)
LIGER_PATCH = "qwen3_vl_moe"


def without_router_loss(model: torch.nn.Module) -> torch.nn.Module:
    """``model`` with the router's load-balancing loss off (module docstring: no router loss): a folder's config
    asking for it would add a loss the frozen router cannot act on."""
    config = cast("PreTrainedConfig", model.config)  # a transformers model's (nn.Module does not name it)
    text = getattr(config, "text_config", config)
    text.output_router_logits = False
    return model
