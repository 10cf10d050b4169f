"""Qwen3-VL dense checkpoints (``Qwen/Qwen3-VL-{2,4,8,32}B-Instruct``), for ``catalogue.py``.

Where each fact was checked:
- Hub ids: Qwen's "Qwen3-VL" collection (2B, 4B, 8B, 32B Instruct; Thinking variants share the configs).
- config.json: the 4B file as copied verbatim into public code (text 2560 / 9728 / 36 layers / 32 heads / 8 KV
  heads, head_dim 128, tied embeddings, 262144 positions, rope_theta 5e6, interleaved M-RoPE [24, 20, 20]; vision
  depth 24, hidden 1024, intermediate 4096, 16 heads, DeepStack [5, 11, 17], 2304 positions) and the 2B's vision and
  text sizes likewise (text 2048 / 6144 / 28 layers / 16 heads, tied). The 8B's file as a public write-up of the
  architecture quotes it (not whole): text 4096 / 36 layers / 32 heads / 8 KV heads, the same positions and M-RoPE;
  vision depth 27, hidden 1152, DeepStack [8, 16, 24], 16 px patches, out 4096; its MLP width 12288 and untied
  embeddings are Qwen3-8B's (not in the quote). The 32B file was not seen: its text sizes are Qwen3-32B's (5120 /
  25600 / 64 / 64 heads, untied) and its tower the 8B's (transformers' Qwen3VLVisionConfig default: depth 27, hidden
  1152, intermediate 4304); marked in its notes.
- Token ids: ``<|vision_start|>`` 151652, ``<|vision_end|>`` 151653, ``<|image_pad|>`` 151655, ``<|video_pad|>``
  151656 (the 4B file, and Qwen3VLConfig's defaults).
- video_preprocessor_config.json: ``size`` 4096 / 25165824 pixels, 16 px patches, mean = std = 0.5 (the repos'
  file as public code copies it): :data:`~dit_lora.families.videollm.qwen3_vl.QWEN3_VIDEO_DEFAULTS`.
- Recommended LoRA: LLaMA-Factory's ``examples/train_lora`` defaults (rank 8, alpha 16, lr 1e-4, batch 1 x 8), as for
  the other video LLMs; Qwen publishes no LoRA recipe for Qwen3-VL.

Its entries are data: the family's ``catalogue.json`` (those of family ``qwen3_vl``).
"""

from __future__ import annotations

from dit_lora.families.videollm.catalogue import ENTRIES as _ALL

ENTRIES = [e for e in _ALL if e.family == "qwen3_vl"]
