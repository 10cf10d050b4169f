"""A tiny, randomly initialised Qwen3-VL MoE checkpoint built locally (no Hub access needed).

:func:`build_tiny_qwen3_vl_moe` writes what ``Qwen/Qwen3-VL-30B-A3B-Instruct`` ships, shrunk: the tiny dense
Qwen3-VL of :mod:`~dit_lora.families.videollm.demo_qwen3_vl` (the same tower, tokenizer, Instruct template and
``video_preprocessor_config.json``) with the language model's MLPs replaced by sparse mixture-of-experts blocks as
``Qwen3VLMoeForConditionalGeneration`` holds them: a router (``mlp.gate``, one weight row per expert) and the experts
fused into two 3-D parameters (``mlp.experts.gate_up_proj`` (experts, 2 x moe_intermediate, hidden) and
``mlp.experts.down_proj`` (experts, hidden, moe_intermediate)). Four experts, two per token, both layers sparse (the
real 30B-A3B: 128 experts, 8 per token, all 48 layers sparse). A ``dit_lora_tiny.json`` marker
(:data:`TINY_QWEN3_VL_MOE_VERSION`) makes the build idempotent.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from dit_lora.families.videollm.demo_common import build_tiny_checkpoint
from dit_lora.families.videollm.demo_qwen3_vl import (
    QWEN3_VL_PREPROCESSOR,
    build_tiny_qwen3_vl_tokenizer,
    get_tiny_qwen3_vl_config,
)

__all__ = ["TINY_QWEN3_VL_MOE_VERSION", "build_tiny_qwen3_vl_moe", "get_tiny_qwen3_vl_moe_config"]

TINY_QWEN3_VL_MOE_VERSION = 1  # bump when the config, init, tokenizer or template change

#: the sparse blocks' sizes (the rest of the language model is the dense tiny one's)
_MOE: dict[str, Any] = {
    "num_experts": 4,
    "num_experts_per_tok": 2,
    "moe_intermediate_size": 32,
    "decoder_sparse_step": 1,  # every layer sparse, as in the published MoE checkpoints
    "mlp_only_layers": [],
    "router_aux_loss_coef": 0.001,
}


def get_tiny_qwen3_vl_moe_config(tokenizer=None):
    """The tiny ``Qwen3VLMoeConfig``: the dense tiny config's tower, ids and text sizes, plus :data:`_MOE`."""
    from transformers import Qwen3VLMoeConfig

    dense = get_tiny_qwen3_vl_config(tokenizer).to_dict()
    text = {k: v for k, v in dense["text_config"].items() if k not in ("model_type", "architectures")}
    vision = {k: v for k, v in dense["vision_config"].items() if k not in ("model_type", "architectures")}
    ids = ("image_token_id", "video_token_id", "vision_start_token_id", "vision_end_token_id")
    return Qwen3VLMoeConfig(
        text_config=dict(text, **_MOE),
        vision_config=vision,
        tie_word_embeddings=False,
        **{k: dense[k] for k in ids},
    )


def build_tiny_qwen3_vl_moe(path: str | Path, seed: int = 0) -> Path:
    """Write the tiny Qwen3-VL MoE checkpoint (see the module docstring) to ``path`` and return it.

    Deterministic for a given ``seed``; idempotent and atomic like the other tiny builders. Loads offline with
    ``Qwen3VLMoeForConditionalGeneration.from_pretrained(path)``.
    """
    return build_tiny_checkpoint(
        path,
        kind="qwen3_vl_moe",
        seed=seed,
        version=TINY_QWEN3_VL_MOE_VERSION,
        model_class="Qwen3VLMoeForConditionalGeneration",
        tokenizer=build_tiny_qwen3_vl_tokenizer,
        config=get_tiny_qwen3_vl_moe_config,
        preprocessor=QWEN3_VL_PREPROCESSOR,
    )
