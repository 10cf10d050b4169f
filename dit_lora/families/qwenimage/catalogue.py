"""Qwen-Image checkpoints (``QwenImagePipeline``, ``QwenImageEditPipeline``, ``QwenImageEditPlusPipeline``).

Where each fact was checked (no network at run time; these are copies of published files):
- transformer/config.json: ``QwenImageTransformer2DModel`` of ``Qwen/Qwen-Image`` (60 layers, 24 heads x 128,
  joint_attention_dim 3584, in_channels 64, out_channels 16, patch 2, axes_dims_rope [16, 56, 56]): diffusers'
  class defaults agree, and public configs quoting the Hub file (searched). The Edit models share it; Edit-2511 adds
  ``zero_cond_t: true`` (the reference images' tokens modulated at t = 0), as public copies of its config show.
- vae/config.json: ``AutoencoderKLQwenImage``'s defaults (base_dim 96, z_dim 16, dim_mult [1, 2, 4, 4], the 16
  ``latents_mean``/``latents_std`` values), the Qwen-Image VAE all five releases ship.
- scheduler/scheduler_config.json: dynamic shifting, base/max image seq len 256/8192, base/max shift 0.5/0.9,
  shift_terminal 0.02, exponential (public copies of Qwen/Qwen-Image's file; musubi-tuner's ``qwen_shift`` takes the
  same line).
- text_encoder/config.json: Qwen2.5-VL-7B-Instruct (hidden 3584, 28 layers, 28 heads, 4 kv heads, vocab 152064).
- Edit prompt handling: diffusers ``pipeline_qwenimage_edit.py`` (control image resized to a 1024 x 1024 area, drop
  index 64) and ``pipeline_qwenimage_edit_plus.py`` (each image at a 384 x 384 area for the text encoder and
  1024 x 1024 for the VAE, "Picture N:" prefixes).
- Defaults: diffusers ``examples/dreambooth/README_qwen.md`` (lr 2e-4, batch 1 x accumulation 4),
  ``train_dreambooth_lora_qwen_image.py`` (``--max_sequence_length 512``); resolution: Qwen-Image's model card
  (1328 x 1328 for 1:1), 1024 for the Edit models (the pipelines' own 1024 x 1024 area); rank 16 as musubi-tuner's
  guide (``--network_dim 16``).

Not confirmed (kept out of signatures): ``pooled_projection_dim`` (an unused key of the Hub file), byte-exact copies of
the 2512 and Edit repos' configs beyond the values named above.
"""

from __future__ import annotations

from dit_lora.catalogue.entry import Checkpoint

_TRANSFORMER = {
    "_class_name": "QwenImageTransformer2DModel",
    "_diffusers_version": "0.34.0.dev0",
    "attention_head_dim": 128,
    "axes_dims_rope": [16, 56, 56],
    "guidance_embeds": False,
    "in_channels": 64,
    "joint_attention_dim": 3584,
    "num_attention_heads": 24,
    "num_layers": 60,
    "out_channels": 16,
    "patch_size": 2,
}
_VAE = {
    "_class_name": "AutoencoderKLQwenImage",
    "_diffusers_version": "0.34.0.dev0",
    "attn_scales": [],
    "base_dim": 96,
    "dim_mult": [1, 2, 4, 4],
    "dropout": 0.0,
    "latents_mean": [
        -0.7571,
        -0.7089,
        -0.9113,
        0.1075,
        -0.1745,
        0.9653,
        -0.1517,
        1.5508,
        0.4134,
        -0.0715,
        0.5517,
        -0.3632,
        -0.1922,
        -0.9497,
        0.2503,
        -0.2921,
    ],  # fmt: skip
    "latents_std": [
        2.8184,
        1.4541,
        2.3275,
        2.6558,
        1.2196,
        1.7708,
        2.6052,
        2.0743,
        3.2687,
        2.1526,
        2.8652,
        1.5579,
        1.6382,
        1.1253,
        2.8251,
        1.916,
    ],  # fmt: skip
    "num_res_blocks": 2,
    "temperal_downsample": [False, True, True],
    "z_dim": 16,
}
_SCHEDULER = {
    "_class_name": "FlowMatchEulerDiscreteScheduler",
    "_diffusers_version": "0.34.0.dev0",
    "base_image_seq_len": 256,
    "base_shift": 0.5,
    "invert_sigmas": False,
    "max_image_seq_len": 8192,
    "max_shift": 0.9,
    "num_train_timesteps": 1000,
    "shift": 1.0,
    "shift_terminal": 0.02,
    "stochastic_sampling": False,
    "time_shift_type": "exponential",
    "use_beta_sigmas": False,
    "use_dynamic_shifting": True,
    "use_exponential_sigmas": False,
    "use_karras_sigmas": False,
}
_QWEN25_VL_7B = {
    "architectures": ["Qwen2_5_VLForConditionalGeneration"],
    "model_type": "qwen2_5_vl",
    "attention_dropout": 0.0,
    "hidden_act": "silu",
    "hidden_size": 3584,
    "intermediate_size": 18944,
    "num_hidden_layers": 28,
    "num_attention_heads": 28,
    "num_key_value_heads": 4,
    "max_position_embeddings": 128000,
    "max_window_layers": 28,
    "rms_norm_eps": 1e-06,
    "rope_theta": 1000000.0,
    "sliding_window": 32768,
    "use_sliding_window": False,
    "tie_word_embeddings": False,
    "torch_dtype": "bfloat16",
    "vocab_size": 152064,
    "bos_token_id": 151643,
    "eos_token_id": 151645,
    "vision_start_token_id": 151652,
    "vision_end_token_id": 151653,
    "vision_token_id": 151654,
    "image_token_id": 151655,
    "video_token_id": 151656,
    "rope_scaling": {"type": "mrope", "mrope_section": [16, 24, 24]},
    "vision_config": {
        "depth": 32,
        "hidden_act": "silu",
        "hidden_size": 1280,
        "intermediate_size": 3420,
        "num_heads": 16,
        "in_chans": 3,
        "out_hidden_size": 3584,
        "patch_size": 14,
        "spatial_merge_size": 2,
        "spatial_patch_size": 14,
        "window_size": 112,
        "fullatt_block_indexes": [7, 15, 23, 31],
        "tokens_per_second": 2,
        "temporal_patch_size": 2,
    },
}
_TOKENIZER_FILES = (
    "added_tokens.json",
    "chat_template.jinja",
    "merges.txt",
    "special_tokens_map.json",
    "tokenizer_config.json",
    "vocab.json",
)
_SOURCES = {
    "defaults": "diffusers README_qwen.md and train_dreambooth_lora_qwen_image.py; musubi-tuner docs/qwen_image.md",
    "lora_alpha": "alpha = rank: the update at the rank's own scale (musubi-tuner's --network_alpha default is 1)",
    "train_batch_size": "diffusers examples/dreambooth/README_qwen.md (batch 1 x accumulation 4)",
    "learning_rate": "diffusers examples/dreambooth/README_qwen.md (lr 2e-4, batch 1 x accumulation 4)",
    "gradient_accumulation_steps": "diffusers examples/dreambooth/README_qwen.md (batch 1 x accumulation 4)",
    "rank": "musubi-tuner docs/qwen_image.md (--network_dim 16)",
    "resolution": "Qwen-Image model card (1328 x 1328 at 1:1); the Edit pipelines' 1024 x 1024 area",
    "max_sequence_length": "QwenImagePipeline.__call__ and train_dreambooth_lora_qwen_image.py (512)",
    "configs": "module docstring of dit_lora/families/qwenimage/catalogue.py",
}


def _model_index(pipeline: str) -> dict:
    index = {
        "_class_name": pipeline,
        "_diffusers_version": "0.35.0.dev0",
        "scheduler": ["diffusers", "FlowMatchEulerDiscreteScheduler"],
        "text_encoder": ["transformers", "Qwen2_5_VLForConditionalGeneration"],
        "tokenizer": ["transformers", "Qwen2Tokenizer"],
        "transformer": ["diffusers", "QwenImageTransformer2DModel"],
        "vae": ["diffusers", "AutoencoderKLQwenImage"],
    }
    if pipeline != "QwenImagePipeline":
        index["processor"] = ["transformers", "Qwen2VLProcessor"]
    return index


#: the registry name that trains each pipeline class
FAMILY_OF = {
    "QwenImagePipeline": "qwenimage",
    "QwenImageEditPipeline": "qwenimage_edit",
    "QwenImageEditPlusPipeline": "qwenimage_edit_plus",
}


def _entry(
    hub_id: str, title: str, pipeline: str, px: int, *, zero_cond_t: bool = False, notes: str = ""
) -> Checkpoint:
    transformer = dict(_TRANSFORMER, **({"zero_cond_t": True} if zero_cond_t else {}))
    identity = {
        k: transformer[k]
        for k in ("attention_head_dim", "num_attention_heads", "joint_attention_dim", "in_channels", "axes_dims_rope")
    }
    identity["zero_cond_t"] = zero_cond_t or None
    return Checkpoint(
        hub_id=hub_id,
        family=FAMILY_OF[pipeline],
        title=title,
        signature={"model_index.json": {"_class_name": pipeline}, "transformer/config.json": identity},
        depth={"transformer/config.json": {"num_layers": transformer["num_layers"]}},
        configs={
            "model_index.json": _model_index(pipeline),
            "transformer/config.json": transformer,
            "vae/config.json": _VAE,
            "scheduler/scheduler_config.json": _SCHEDULER,
            "text_encoder/config.json": _QWEN25_VL_7B,
        },
        stored_dtype="bf16",
        text_length=512,
        defaults={
            "rank": 16,
            "lora_alpha": 16,
            "learning_rate": 2e-4,
            "train_batch_size": 1,
            "gradient_accumulation_steps": 4,
            "resolution": px,
            "max_sequence_length": 512,
        },
        sources=_SOURCES,
        trained={"resolution": px},
        tokenizer_files=_TOKENIZER_FILES,
        notes=notes,
    )


ENTRIES = [
    _entry("Qwen/Qwen-Image", "Qwen-Image (20B)", "QwenImagePipeline", 1328, notes="text-to-image; dynamic shift"),
    _entry(
        "Qwen/Qwen-Image-2512",
        "Qwen-Image 2512 (20B)",
        "QwenImagePipeline",
        1328,
        notes="the December 2025 update; same architecture and files as Qwen-Image",
    ),
    _entry(
        "Qwen/Qwen-Image-Edit",
        "Qwen-Image-Edit (20B)",
        "QwenImageEditPipeline",
        1024,
        notes="one control image per sample; --family qwenimage_edit",
    ),
    _entry(
        "Qwen/Qwen-Image-Edit-2509",
        "Qwen-Image-Edit 2509 (20B)",
        "QwenImageEditPlusPipeline",
        1024,
        notes="one to three control images per sample (Picture 1, 2, 3); --family qwenimage_edit_plus",
    ),
    _entry(
        "Qwen/Qwen-Image-Edit-2511",
        "Qwen-Image-Edit 2511 (20B)",
        "QwenImageEditPlusPipeline",
        1024,
        zero_cond_t=True,
        notes="as 2509, control tokens modulated at t = 0 (zero_cond_t); --family qwenimage_edit_plus",
    ),
]
