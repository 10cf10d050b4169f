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
"""

from __future__ import annotations

from typing import Any

from dit_lora.catalogue.entry import Checkpoint
from dit_lora.families.videollm.catalogue_common import video_llm_checkpoint

#: the text models' positions (the MoE's too)
POSITIONS = 262144
#: the Hub trees' tokenizer files (the MoE's too)
TOKENIZER_FILES = ("chat_template.json", "merges.txt", "tokenizer.json", "tokenizer_config.json", "vocab.json")

#: the two towers: (depth, hidden, intermediate, DeepStack layers)
_SMALL_TOWER = (24, 1024, 4096, [5, 11, 17])
LARGE_TOWER = (27, 1152, 4304, [8, 16, 24])


def vision_config(model_type: str, tower: tuple, out_hidden: int) -> dict[str, Any]:
    """The tower's ``vision_config`` (``model_type`` as the dense or MoE file spells it) for ``out_hidden`` text."""
    depth, vision_hidden, vision_inter, deepstack = tower
    return {
        "model_type": model_type,
        "depth": depth,
        "hidden_size": vision_hidden,
        "intermediate_size": vision_inter,
        "num_heads": 16,
        "hidden_act": "gelu_pytorch_tanh",
        "in_channels": 3,
        "patch_size": 16,
        "spatial_merge_size": 2,
        "temporal_patch_size": 2,
        "out_hidden_size": out_hidden,
        "num_position_embeddings": 2304,
        "deepstack_visual_indexes": deepstack,
    }


def model_config(architecture: str, model_type: str, tied: bool, text: dict, vision: dict) -> dict[str, Any]:
    """``config.json``: the class, the vision token ids and the two sub-configs."""
    return {
        "architectures": [architecture],
        "model_type": model_type,
        "image_token_id": 151655,
        "video_token_id": 151656,
        "vision_start_token_id": 151652,
        "vision_end_token_id": 151653,
        "tie_word_embeddings": tied,
        "text_config": text,
        "vision_config": vision,
    }


def _qwen3_vl(
    size: str, *, hidden: int, inter: int, layers: int, heads: int, tied: bool, tower: tuple, notes: str = ""
) -> Checkpoint:
    text = {
        "model_type": "qwen3_vl_text",
        "hidden_size": hidden,
        "intermediate_size": inter,
        "num_hidden_layers": layers,
        "num_attention_heads": heads,
        "num_key_value_heads": 8,
        "head_dim": 128,
        "hidden_act": "silu",
        "max_position_embeddings": POSITIONS,
        "rms_norm_eps": 1e-06,
        "rope_scaling": {"mrope_interleaved": True, "mrope_section": [24, 20, 20], "rope_type": "default"},
        "rope_theta": 5000000,
        "attention_bias": False,
        "bos_token_id": 151643,
        "eos_token_id": 151645,
        "tie_word_embeddings": tied,
        "vocab_size": 151936,
        "dtype": "bfloat16",
    }
    vision = vision_config("qwen3_vl", tower, hidden)
    identity = {
        "model_type": "qwen3_vl",
        "text_config.hidden_size": hidden,
        "text_config.num_attention_heads": heads,
        "vision_config.hidden_size": vision["hidden_size"],
    }
    return video_llm_checkpoint(
        hub_id=f"Qwen/Qwen3-VL-{size}-Instruct",
        family="qwen3_vl",
        title=f"Qwen3-VL {size} Instruct",
        identity=identity,
        depth={"text_config.num_hidden_layers": layers},
        config=model_config("Qwen3VLForConditionalGeneration", "qwen3_vl", tied, text, vision),
        text_length=POSITIONS,
        tokenizer_files=TOKENIZER_FILES,
        notes=notes,
    )


_UNSEEN = "config not seen: text sizes of {}, the larger tower of transformers' Qwen3VLVisionConfig (unconfirmed)"

ENTRIES = [
    _qwen3_vl("2B", hidden=2048, inter=6144, layers=28, heads=16, tied=True, tower=_SMALL_TOWER),
    _qwen3_vl("4B", hidden=2560, inter=9728, layers=36, heads=32, tied=True, tower=_SMALL_TOWER),
    _qwen3_vl(
        "8B",
        hidden=4096,
        inter=12288,
        layers=36,
        heads=32,
        tied=False,
        tower=LARGE_TOWER,
        notes="checked against a quote of its config.json; MLP width and untied embeddings as Qwen3-8B's",
    ),
    _qwen3_vl(
        "32B",
        hidden=5120,
        inter=25600,
        layers=64,
        heads=64,
        tied=False,
        tower=LARGE_TOWER,
        notes=_UNSEEN.format("Qwen3-32B"),
    ),
]
