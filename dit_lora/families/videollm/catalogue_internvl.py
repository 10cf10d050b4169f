"""InternVL3.5 checkpoints in transformers' format (``OpenGVLab/InternVL3_5-{1,2,4,8}B-HF``), for ``catalogue.py``.

Where each fact was checked:
- Hub ids: OpenGVLab's InternVL3.5 collection; the ``-HF`` repos are the ``InternVLForConditionalGeneration``
  conversions (the repos without the suffix hold InternVL's own remote code, which dit-lora does not load).
- Language models: the ``llm_config`` of the InternVL3.5 repos' config.json (Qwen3): the 1B's Qwen3-0.6B (hidden 1024,
  intermediate 3072, 28 layers, 16 heads, 8 KV heads, head_dim 128) and the 8B's Qwen3-8B (4096, 12288, 36 layers,
  32 heads, 8 KV heads), both vocab 151936, 40960 positions, rope_theta 1e6, as stored on the Hub. The 2B and 4B
  language models are Qwen3-1.7B (2048, 6144, 28 layers, 16 heads, 8 KV heads) and Qwen3-4B (2560, 9728, 36 layers,
  32 heads, 8 KV heads), the values of Qwen's own config.json files (the InternVL3.5 files of those two were not
  seen in full: marked in their notes). Qwen3-0.6B/1.7B/4B tie their embeddings, Qwen3-8B does not.
- The HF conversion: ``image_token_id`` 151671 (``<IMG_CONTEXT>``; a config.json of a fine-tune of
  ``InternVL3_5-1B-HF`` on the Hub, and MindSpeed-MM's InternVL3.5 ``img_context_token_id``), ``image_seq_length``
  256, ``downsample_ratio`` 0.5, ``projector_hidden_act`` gelu, ``vision_feature_layer`` -1; the vision tower is
  InternViT-300M-448px-V2_5 (hidden 1024, intermediate 4096, 24 layers, 16 heads, 448 px, 14 px patches, qkv bias,
  layer scale 0.1, LayerNorm eps 1e-6), written by transformers' ``convert_internvl_weights_to_hf.py``.
- Tokenizer files: the HF repos' tree (``tokenizer.json``, ``vocab.json``, ``merges.txt``, ``tokenizer_config.json``,
  ``special_tokens_map.json``, ``added_tokens.json``, ``chat_template.jinja``).
- Recommended LoRA: LLaMA-Factory's ``examples/train_lora`` defaults, as for the other video LLMs. OpenGVLab's own
  LoRA script (``internvl_chat/shell/internvl2.5/2nd_finetune/internvl2_5_1b_dynamic_res_2nd_finetune_lora.sh``;
  none is published for 3.0 or 3.5) trains rank 16 on the language model only (tower and projector frozen) at 4e-5,
  batch 16, ``--max_seq_length 8192``: its sequence length is taken, since 8 frames are 2048 image tokens.

Its entries are data: the family's ``catalogue.json`` (those of family ``internvl``).
"""

from __future__ import annotations

from dit_lora.families.videollm.catalogue import ENTRIES as _ALL

ENTRIES = [e for e in _ALL if e.family == "internvl"]
