"""Video LLM checkpoints (``videollm_lora.py``): LLaVA-NeXT-Video (llava-hf), Qwen2.5-VL (Qwen), InternVL3.5
(OpenGVLab; where its facts were checked: :mod:`~dit_lora.families.videollm.catalogue_internvl`'s), Qwen3-VL (Qwen;
:mod:`~dit_lora.families.videollm.catalogue_qwen3_vl`'s) and Qwen3-VL MoE (:mod:`~dit_lora.families.videollm.
catalogue_qwen3_vl_moe`'s).

Where each fact was checked:
- Hub ids: the llava-hf "LLaVA-NeXT-Video" collection (7B, 7B-32K, 7B-DPO, 34B, 34B-DPO) and the Qwen "Qwen2.5-VL"
  collection (3B, 7B, 32B, 72B Instruct).
- LLaVA-NeXT-Video config.json: the Hub blame of ``LLaVA-NeXT-Video-7B-hf`` (video token 32000, image 32001,
  text vocab 32064, vicuna-7b-v1.5 text model, CLIP ViT-L/336 vision tower, average pooling stride 2) and of
  ``LLaVA-NeXT-Video-34B-hf`` (Nous-Hermes-2-Yi-34B: hidden 7168, 60 layers, 56 heads, 8 KV heads, vocab 64064,
  video token 64000); the 7B file leaves the Llama sizes at ``LlamaConfig``'s defaults (4096, 32 layers, 32
  heads), written out here. transformers' ``convert_llava_next_video_weights_to_hf.py`` agrees.
- Qwen2.5-VL config.json: the Hub blame of ``Qwen2.5-VL-7B-Instruct`` (hidden 3584, 28 layers, 28 heads, 4 KV
  heads, vocab 152064), a verbatim copy of the 3B file (2048, 36 layers, 16 heads, 2 KV heads, tied embeddings,
  vocab 151936) and the official 72B-AWQ config (8192, 80 layers, 64 heads, 8 KV heads). The 32B config was not
  seen: its values are those of Qwen2.5-32B's language model (hidden 5120, 64 layers, 40 heads, 8 KV heads) and
  are marked unconfirmed. ``tokens_per_second`` is 2 in every Hub file (transformers' default is 4).
- Tokenizer files: the Hub trees (LLaVA: ``tokenizer.json`` and its siblings; Qwen: ``tokenizer.json``,
  ``vocab.json``, ``merges.txt``): both load with ``tokenizers`` alone.
- Recommended LoRA: LLaMA-Factory ``examples/train_lora/qwen2_5vl_lora_sft.yaml`` and ``llava1_5_lora_sft.yaml``
  (``lora_rank`` 8, ``lora_alpha`` 16 = 2 x rank by default, ``learning_rate`` 1e-4, batch 1 x accumulation 8).
  Neither llava-hf nor Qwen publishes a LoRA recipe for these models.

The entries themselves are data: ``catalogue.json`` beside this module (:mod:`dit_lora.catalogue.files`).
"""

from __future__ import annotations

from dit_lora.catalogue.files import read_catalogue

_FILE = read_catalogue(__name__)
#: every video-LLM entry, in the file's order: LLaVA-NeXT-Video, Qwen2.5-VL, InternVL3.5, Qwen3-VL, Qwen3-VL MoE
ENTRIES = _FILE.entries
#: the file's parts by name (``llama_factory_defaults`` and ``llama_factory_source`` for catalogue_common.py)
PARTS = _FILE.parts
