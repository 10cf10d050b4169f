"""Video LLM checkpoints (``videollm_lora.py``): LLaVA-NeXT-Video (llava-hf), Qwen2.5-VL (Qwen), InternVL3.5
(OpenGVLab; its entries and sources are :mod:`~dit_lora.families.videollm.catalogue_internvl`'s), Qwen3-VL (Qwen;
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
"""

from __future__ import annotations

from dit_lora.catalogue.entry import Checkpoint
from dit_lora.families.videollm.catalogue_common import video_llm_checkpoint
from dit_lora.families.videollm.catalogue_internvl import ENTRIES as INTERNVL_ENTRIES
from dit_lora.families.videollm.catalogue_qwen3_vl import ENTRIES as QWEN3_VL_ENTRIES
from dit_lora.families.videollm.catalogue_qwen3_vl_moe import ENTRIES as QWEN3_VL_MOE_ENTRIES

_CLIP_336 = {
    "model_type": "clip_vision_model",
    "hidden_size": 1024,
    "intermediate_size": 4096,
    "image_size": 336,
    "patch_size": 14,
    "num_hidden_layers": 24,
    "num_attention_heads": 16,
    "projection_dim": 768,
    "vocab_size": 32000,
}


def _llava(hub_id: str, title: str, *, text: dict, video: int, notes: str = "") -> Checkpoint:
    config = {
        "architectures": ["LlavaNextVideoForConditionalGeneration"],
        "model_type": "llava_next_video",
        "ignore_index": -100,
        "image_grid_pinpoints": [[336, 672], [672, 336], [672, 672], [1008, 336], [336, 1008]],
        "image_token_index": video + 1,
        "video_token_index": video,
        "projector_hidden_act": "gelu",
        "spatial_pool_mode": "average",
        "spatial_pool_out_channels": 1024,
        "spatial_pool_stride": 2,
        "tie_word_embeddings": False,
        "torch_dtype": "bfloat16",
        "use_image_newline_parameter": True,
        "vision_feature_layer": -2,
        "vision_feature_select_strategy": "default",
        "text_config": text,
        "vision_config": _CLIP_336,
    }
    identity = {
        "model_type": "llava_next_video",
        "video_token_index": video,
        "text_config.model_type": text["model_type"],
        "vision_config.hidden_size": 1024,
    }
    return video_llm_checkpoint(
        hub_id=hub_id,
        family="llava_next_video",
        title=title,
        identity=identity,
        depth={"text_config.num_hidden_layers": text["num_hidden_layers"]},
        config=config,
        text_length=text["max_position_embeddings"],
        tokenizer_files=("added_tokens.json", "special_tokens_map.json", "tokenizer.json", "tokenizer_config.json"),
        notes=notes,
    )


def _llama(**sizes) -> dict:
    base = {
        "model_type": "llama",
        "architectures": ["LlamaForCausalLM"],
        "hidden_size": 4096,
        "intermediate_size": 11008,
        "num_hidden_layers": 32,
        "num_attention_heads": 32,
        "num_key_value_heads": 32,
        "max_position_embeddings": 4096,
        "rms_norm_eps": 1e-05,
        "pad_token_id": 0,
        "vocab_size": 32064,
        "rope_scaling": {"factor": 2.0, "type": "linear"},
        "torch_dtype": "bfloat16",
    }
    base.update(sizes)
    return base


#: the special tokens of every Qwen2.5-VL size (the same ids in each Hub config.json)
_QWEN_TOKEN_IDS = {
    "bos_token_id": 151643,
    "eos_token_id": 151645,
    "vision_start_token_id": 151652,
    "vision_end_token_id": 151653,
    "vision_token_id": 151654,
    "image_token_id": 151655,
    "video_token_id": 151656,
}
_QWEN_TOKENIZER_FILES = (
    "added_tokens.json",
    "chat_template.json",
    "merges.txt",
    "special_tokens_map.json",
    "tokenizer.json",
    "tokenizer_config.json",
    "vocab.json",
)


def _qwen(
    size: str,
    *,
    hidden: int,
    inter: int,
    layers: int,
    heads: int,
    kv: int,
    vocab: int,
    tied: bool,
    vision_inter: int = 3420,
    notes: str = "",
) -> Checkpoint:
    config = {
        "architectures": ["Qwen2_5_VLForConditionalGeneration"],
        "model_type": "qwen2_5_vl",
        "hidden_act": "silu",
        "hidden_size": hidden,
        "intermediate_size": inter,
        "num_hidden_layers": layers,
        "num_attention_heads": heads,
        "num_key_value_heads": kv,
        "max_position_embeddings": 128000,
        "max_window_layers": layers,
        "rms_norm_eps": 1e-06,
        "rope_theta": 1000000.0,
        "sliding_window": 32768,
        "use_sliding_window": False,
        "tie_word_embeddings": tied,
        "torch_dtype": "bfloat16",
        "vocab_size": vocab,
        **_QWEN_TOKEN_IDS,
        "rope_scaling": {"type": "mrope", "mrope_section": [16, 24, 24]},
        "vision_config": {
            "depth": 32,
            "hidden_act": "silu",
            "hidden_size": 1280,
            "intermediate_size": vision_inter,
            "num_heads": 16,
            "in_chans": 3,
            "out_hidden_size": hidden,
            "patch_size": 14,
            "spatial_merge_size": 2,
            "spatial_patch_size": 14,
            "window_size": 112,
            "fullatt_block_indexes": [7, 15, 23, 31],
            "tokens_per_second": 2,
            "temporal_patch_size": 2,
        },
    }
    identity = {
        "model_type": "qwen2_5_vl",
        "hidden_size": hidden,
        "num_attention_heads": heads,
        "num_key_value_heads": kv,
    }
    return video_llm_checkpoint(
        hub_id=f"Qwen/Qwen2.5-VL-{size}-Instruct",
        family="qwen2_5_vl",
        title=f"Qwen2.5-VL {size} Instruct",
        identity=identity,
        depth={"num_hidden_layers": layers},
        config=config,
        text_length=128000,
        tokenizer_files=_QWEN_TOKENIZER_FILES,
        notes=notes,
    )


_YI_34B = _llama(
    hidden_size=7168,
    intermediate_size=20480,
    num_hidden_layers=60,
    num_attention_heads=56,
    num_key_value_heads=8,
    vocab_size=64064,
    rope_theta=5000000.0,
    eos_token_id=7,
    rope_scaling=None,
)
_MISTRAL_7B = {
    "model_type": "mistral",
    "architectures": ["MistralForCausalLM"],
    "hidden_size": 4096,
    "intermediate_size": 14336,
    "num_hidden_layers": 32,
    "num_attention_heads": 32,
    "num_key_value_heads": 8,
    "max_position_embeddings": 32768,
    "rms_norm_eps": 1e-05,
    "rope_theta": 1000000.0,
    "vocab_size": 32064,
    "torch_dtype": "bfloat16",
}

ENTRIES = [
    _llava("llava-hf/LLaVA-NeXT-Video-7B-hf", "LLaVA-NeXT-Video 7B (Vicuna)", text=_llama(), video=32000),
    _llava(
        "llava-hf/LLaVA-NeXT-Video-7B-DPO-hf",
        "LLaVA-NeXT-Video 7B DPO (Vicuna)",
        text=_llama(),
        video=32000,
        notes="same architecture as 7B (a 7B config matches 7B first; the defaults are the same)",
    ),
    _llava(
        "llava-hf/LLaVA-NeXT-Video-7B-32K-hf",
        "LLaVA-NeXT-Video 7B 32K (Mistral)",
        text=_MISTRAL_7B,
        video=32000,
        notes="Mistral-7B-Instruct-v0.2 text model; its text sizes are Mistral 7B's (config not seen in full)",
    ),
    _llava("llava-hf/LLaVA-NeXT-Video-34B-hf", "LLaVA-NeXT-Video 34B (Yi)", text=_YI_34B, video=64000),
    _llava(
        "llava-hf/LLaVA-NeXT-Video-34B-DPO-hf",
        "LLaVA-NeXT-Video 34B DPO (Yi)",
        text=_YI_34B,
        video=64000,
        notes="same architecture as 34B",
    ),
    _qwen("3B", hidden=2048, inter=11008, layers=36, heads=16, kv=2, vocab=151936, tied=True),
    _qwen("7B", hidden=3584, inter=18944, layers=28, heads=28, kv=4, vocab=152064, tied=False),
    _qwen(
        "32B",
        hidden=5120,
        inter=27648,
        layers=64,
        heads=40,
        kv=8,
        vocab=152064,
        tied=False,
        notes="config not seen: sizes of Qwen2.5-32B's language model (unconfirmed)",
    ),
    _qwen(
        "72B",
        hidden=8192,
        inter=29696,
        layers=80,
        heads=64,
        kv=8,
        vocab=152064,
        tied=False,
        vision_inter=3456,
        notes="vocab_size assumed 152064 like 7B (the stored 72B file was cut off before it)",
    ),
]
ENTRIES += INTERNVL_ENTRIES + QWEN3_VL_ENTRIES + QWEN3_VL_MOE_ENTRIES
