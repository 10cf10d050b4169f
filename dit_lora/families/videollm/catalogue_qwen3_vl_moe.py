"""Qwen3-VL MoE checkpoints (``Qwen/Qwen3-VL-30B-A3B-Instruct``, ``Qwen/Qwen3-VL-235B-A22B-Instruct``), for
``catalogue.py``.

Where each fact was checked:
- Hub ids: Qwen's "Qwen3-VL" collection (Thinking variants share the configs).
- 30B-A3B config.json: a public transcription of the file (the fields a parser reads, at the repo's commit 1fc78ad):
  text 2048 hidden / 6144 intermediate / 48 layers / 32 heads / 4 KV heads, head_dim 128, 128 experts, 8 per token,
  ``moe_intermediate_size`` 768, ``decoder_sparse_step`` 1, ``mlp_only_layers`` [], ``norm_topk_prob`` true, vocab
  151936, untied embeddings, rope_theta 5e6, interleaved M-RoPE [24, 20, 20], 262144 positions; the tower depth 27,
  hidden 1152, intermediate 4304, 16 heads, DeepStack [8, 16, 24], 2304 positions, out 2048 (the dense 8B/32B's
  tower); the same token ids as the dense models. transformers' ``Qwen3VLMoeConfig`` docstring names this checkpoint.
  ``router_aux_loss_coef`` (0.001) and ``output_router_logits`` are transformers' defaults, not seen in the file.
- 235B-A22B: its config.json was not seen; the text sizes come from a public Megatron launch script for it (hidden
  4096, FFN 12288, 94 layers, 64 heads, 4 KV groups, kv-channels 128, 128 experts, top 8, MoE FFN 1536, untied) and
  the tower is the 30B-A3B's with out 4096: marked in its notes.
- Recommended LoRA: LLaMA-Factory's ``examples/train_lora`` defaults, as for the dense Qwen3-VL.
"""

from __future__ import annotations

from typing import Any

from dit_lora.catalogue.entry import Checkpoint
from dit_lora.families.videollm.catalogue_common import video_llm_checkpoint
from dit_lora.families.videollm.catalogue_qwen3_vl import (
    LARGE_TOWER,
    POSITIONS,
    TOKENIZER_FILES,
    model_config,
    vision_config,
)


def _text(hidden: int, inter: int, layers: int, heads: int, experts: int, per_token: int, moe_inter: int) -> dict:
    return {
        "model_type": "qwen3_vl_moe_text",
        "hidden_size": hidden,
        "intermediate_size": inter,
        "num_hidden_layers": layers,
        "num_attention_heads": heads,
        "num_key_value_heads": 4,
        "head_dim": 128,
        "hidden_act": "silu",
        "max_position_embeddings": POSITIONS,
        "rms_norm_eps": 1e-06,
        "rope_scaling": {"mrope_interleaved": True, "mrope_section": [24, 20, 20], "rope_type": "default"},
        "rope_theta": 5000000,
        "attention_bias": False,
        "decoder_sparse_step": 1,
        "mlp_only_layers": [],
        "num_experts": experts,
        "num_experts_per_tok": per_token,
        "moe_intermediate_size": moe_inter,
        "norm_topk_prob": True,
        "bos_token_id": 151643,
        "eos_token_id": 151645,
        "tie_word_embeddings": False,
        "vocab_size": 151936,
        "dtype": "bfloat16",
    }


def _qwen3_vl_moe(size: str, text: dict[str, Any], notes: str = "") -> Checkpoint:
    vision = vision_config("qwen3_vl_moe", LARGE_TOWER, text["hidden_size"])
    identity = {
        "model_type": "qwen3_vl_moe",
        "text_config.hidden_size": text["hidden_size"],
        "text_config.num_attention_heads": text["num_attention_heads"],
        "text_config.moe_intermediate_size": text["moe_intermediate_size"],
        "vision_config.hidden_size": vision["hidden_size"],
    }
    # a copy cut to fewer layers or fewer experts is still this model (the real-layout tests run one)
    depth_keys = ("num_hidden_layers", "num_experts")
    return video_llm_checkpoint(
        hub_id=f"Qwen/Qwen3-VL-{size}-Instruct",
        family="qwen3_vl_moe",
        title=f"Qwen3-VL {size} Instruct (MoE)",
        identity=identity,
        depth={f"text_config.{k}": text[k] for k in depth_keys},
        config=model_config("Qwen3VLMoeForConditionalGeneration", "qwen3_vl_moe", False, text, vision),
        text_length=POSITIONS,
        tokenizer_files=TOKENIZER_FILES,
        notes=notes,
    )


ENTRIES = [
    _qwen3_vl_moe(
        "30B-A3B",
        _text(2048, 6144, 48, 32, experts=128, per_token=8, moe_inter=768),
        notes="checked against a transcription of its config.json; all 128 experts are resident, 8 run per token",
    ),
    _qwen3_vl_moe(
        "235B-A22B",
        _text(4096, 12288, 94, 64, experts=128, per_token=8, moe_inter=1536),
        notes="config not seen: text sizes from a public Megatron launch script, the 30B-A3B's tower (unconfirmed)",
    ),
]
