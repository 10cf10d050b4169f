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

Its entries are data: the family's ``catalogue.json`` (those of family ``qwen3_vl_moe``).
"""

from __future__ import annotations

from dit_lora.families.videollm.catalogue import ENTRIES as _ALL

ENTRIES = [e for e in _ALL if e.family == "qwen3_vl_moe"]
