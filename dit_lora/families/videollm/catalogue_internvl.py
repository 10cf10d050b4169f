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
"""

from __future__ import annotations

from dit_lora.catalogue.entry import Checkpoint
from dit_lora.families.videollm.catalogue_common import (
    LLAMA_FACTORY_DEFAULTS,
    LLAMA_FACTORY_SOURCE,
    video_llm_checkpoint,
)

# 8 frames are 2048 <IMG_CONTEXT> tokens alone: the family's 2048 would cut every conversation
_DEFAULTS = dict(LLAMA_FACTORY_DEFAULTS, max_sequence_length=8192)
_DEFAULT_SOURCE = LLAMA_FACTORY_SOURCE + (
    "; max_sequence_length 8192: OpenGVLab's LoRA script (internvl_chat/shell/internvl2.5/2nd_finetune/"
    "internvl2_5_1b_dynamic_res_2nd_finetune_lora.sh, --max_seq_length 8192)"
)
_IMAGE_TOKEN = 151671
_VOCAB = 151936
_POSITIONS = 40960

#: InternViT-300M-448px-V2_5 in transformers' InternVLVisionConfig spelling
INTERNVIT_300M = {
    "model_type": "internvl_vision",
    "architectures": ["InternVisionModel"],
    "hidden_size": 1024,
    "intermediate_size": 4096,
    "num_hidden_layers": 24,
    "num_attention_heads": 16,
    "image_size": [448, 448],
    "patch_size": [14, 14],
    "num_channels": 3,
    "attention_bias": True,
    "use_qk_norm": False,
    "norm_type": "layer_norm",
    "layer_norm_eps": 1e-06,
    "layer_scale_init_value": 0.1,
    "hidden_act": "gelu",
    "hidden_dropout_prob": 0.0,
    "attention_dropout": 0.0,
    "projection_dropout": 0.0,
    "use_absolute_position_embeddings": True,
    "use_mean_pooling": True,
    "use_mask_token": False,
    "initializer_range": 0.02,
}


def _qwen3(*, hidden: int, inter: int, layers: int, heads: int, tied: bool) -> dict:
    return {
        "model_type": "qwen3",
        "architectures": ["Qwen3ForCausalLM"],
        "hidden_size": hidden,
        "intermediate_size": inter,
        "num_hidden_layers": layers,
        "num_attention_heads": heads,
        "num_key_value_heads": 8,
        "head_dim": 128,
        "hidden_act": "silu",
        "max_position_embeddings": _POSITIONS,
        "max_window_layers": layers,
        "rms_norm_eps": 1e-06,
        "rope_theta": 1000000.0,
        "rope_scaling": None,
        "sliding_window": None,
        "use_sliding_window": False,
        "attention_bias": False,
        "attention_dropout": 0.0,
        "bos_token_id": 151643,
        "eos_token_id": 151645,
        "tie_word_embeddings": tied,
        "torch_dtype": "bfloat16",
        "vocab_size": _VOCAB,
    }


def _internvl(size: str, text: dict, notes: str = "") -> Checkpoint:
    config = {
        "architectures": ["InternVLForConditionalGeneration"],
        "model_type": "internvl",
        "downsample_ratio": 0.5,
        "image_seq_length": 256,
        "image_token_id": _IMAGE_TOKEN,
        "projector_hidden_act": "gelu",
        "vision_feature_layer": -1,
        "vision_feature_select_strategy": "default",
        "tie_word_embeddings": text["tie_word_embeddings"],
        "torch_dtype": "bfloat16",
        "text_config": text,
        "vision_config": INTERNVIT_300M,
    }
    identity = {
        "model_type": "internvl",
        "text_config.model_type": "qwen3",
        "text_config.hidden_size": text["hidden_size"],
        "text_config.num_attention_heads": text["num_attention_heads"],
        "vision_config.hidden_size": INTERNVIT_300M["hidden_size"],
    }
    return video_llm_checkpoint(
        hub_id=f"OpenGVLab/InternVL3_5-{size}-HF",
        family="internvl",
        title=f"InternVL3.5 {size} (transformers format)",
        identity=identity,
        depth={"text_config.num_hidden_layers": text["num_hidden_layers"]},
        config=config,
        text_length=_POSITIONS,
        defaults=_DEFAULTS,
        defaults_source=_DEFAULT_SOURCE,
        tokenizer_files=(
            "added_tokens.json",
            "chat_template.jinja",
            "merges.txt",
            "special_tokens_map.json",
            "tokenizer.json",
            "tokenizer_config.json",
            "vocab.json",
        ),
        notes=notes,
    )


_UNSEEN = "language-model sizes of Qwen's {} config.json (this repo's file not seen in full)"

ENTRIES = [
    _internvl("1B", _qwen3(hidden=1024, inter=3072, layers=28, heads=16, tied=True)),
    _internvl("2B", _qwen3(hidden=2048, inter=6144, layers=28, heads=16, tied=True), _UNSEEN.format("Qwen3-1.7B")),
    _internvl("4B", _qwen3(hidden=2560, inter=9728, layers=36, heads=32, tied=True), _UNSEEN.format("Qwen3-4B")),
    _internvl("8B", _qwen3(hidden=4096, inter=12288, layers=36, heads=32, tied=False)),
]
