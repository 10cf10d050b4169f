"""The peers' memory settings, as their published low-memory configs write them, and dit-lora's counterparts (a part
of :mod:`.peers`).

A user arriving from musubi-tuner, ai-toolkit, diffusion-pipe or OneTrainer brings the flags of a "24 GB" config: the
transformer's dtype or quantization, the text encoder's, checkpointing with its offloading variant, per-GPU batch
sizes, layer offloading. Each row was read in the file of :data:`SOURCES` it names (the 2026 snapshots of
kohya-ss/musubi-tuner, ostris/ai-toolkit, tdrussell/diffusion-pipe and Nerogar/OneTrainer); :mod:`dit_lora.config.peers` merges them
into its table, so the unknown-option message and ``docs/guides/migrating.md`` say them like every other row.
``docs/concepts/memory-plan.md`` compares those configs' published figures with ``dit-lora plan``'s.
"""

from __future__ import annotations

__all__ = ["FLAGS", "SOURCES"]

SOURCES: dict[str, str] = {
    "m-qwen": "musubi-tuner src/musubi_tuner/qwen_image_train_network.py",
    "m-flux2": "musubi-tuner src/musubi_tuner/flux_2_train_network.py",
    "at-wan21": "ai-toolkit config/examples/train_lora_wan21_14b_24gb.yaml",
    "at-wan22": "ai-toolkit config/examples/train_lora_wan22_14b_24gb.yaml",
    "dp-wan": "diffusion-pipe examples/wan_14b_min_vram.toml",
    "dp-models": "diffusion-pipe docs/supported_models.md",
    "ot-config": "OneTrainer modules/util/config/TrainConfig.py",
    "ot-qwen": "OneTrainer training_presets/#qwen LoRA 24GB.json",
}

_NF4_TE = "nf4 through bitsandbytes, not fp8; the text encoder runs only while the cache is built"
_FP8 = (
    "`float8` (the Linear weights cast to float8_e4m3fn, unscaled; norms, embeddings and modulation kept) is "
    "--quantize_base fp8_scaled (fp8 with a scale per 64 inputs, any GPU) or fp8 (torchao, CUDA 8.9+)"
)

#: option -> (the trainers that use it, dit-lora's option or None, the note, the SOURCES keys it was read in);
#: the trainers' keys of "sd-scripts library/train_util.py" and the like are :data:`dit_lora.config.peers.SOURCES`'
FLAGS: dict[str, tuple[str, str | None, str, tuple[str, ...]]] = {
    # musubi-tuner: the text encoders' fp8 and the attention split
    "fp8_vl": ("musubi-tuner", "quantize_text_encoder", _NF4_TE, ("m-qwen",)),
    "fp8_text_encoder": ("musubi-tuner", "quantize_text_encoder", _NF4_TE, ("m-flux2",)),
    "split_attn": (
        "musubi-tuner",
        None,
        "attention runs in one fused kernel that keeps no token x token matrix (--attention_backend), and "
        "`dit-lora plan` counts it so",
        ("m-common",),
    ),
    # ai-toolkit: the model section's quantization, the train section's text-encoder handling, layer offloading
    "qtype": (
        "ai-toolkit",
        "quantize_base",
        "with quantize: true; qfloat8 (the default) is --quantize_base fp8_scaled (any GPU; fp8 with torchao on "
        "CUDA 8.9+); uint8 is int8; uint4 and below (uint3, with or without an accuracy recovery adapter) are nf4, "
        "the one 4-bit scheme",
        ("at", "at-wan22"),
    ),
    "qtype_te": ("ai-toolkit", "quantize_text_encoder", _NF4_TE, ("at", "at-wan22")),
    "unload_text_encoder": (
        "ai-toolkit",
        None,
        "every caption is encoded into the cache and the text encoder released before training (--cache_latents, "
        "on by default): no single trigger-word prompt is needed to train without it on the device",
        ("at", "at-wan21"),
    ),
    "cache_text_embeddings": (
        "ai-toolkit",
        "cache_latents",
        "the captions' text embeddings are cached with the latents and the text encoder released before training; "
        "on by default",
        ("at", "at-wan22"),
    ),
    "layer_offloading_transformer_percent": (
        "ai-toolkit",
        "blocks_to_swap",
        "a number of the transformer's blocks, not a share of its weights: `dit-lora plan` says the smallest that fits",
        ("at",),
    ),
    # diffusion-pipe: its run config's batch, checkpointing and pipeline; its model table's dtypes
    "micro_batch_size_per_gpu": (
        "diffusion-pipe",
        "train_batch_size",
        "per GPU as there; a per-resolution list ([[512, 4], [1024, 1]]) has no counterpart: one batch size for "
        "every bucket",
        ("dp",),
    ),
    "activation_checkpointing": (
        "diffusion-pipe",
        "gradient_checkpointing",
        "true is --gradient_checkpointing true; 'unsloth' (the checkpointed blocks' inputs kept in host memory) is "
        "--gradient_checkpointing true --activation_offloading true",
        ("dp", "dp-wan"),
    ),
    "transformer_dtype": ("diffusion-pipe", "quantize_base", _FP8, ("dp", "dp-wan")),
    "diffusion_model_dtype": ("diffusion-pipe", "quantize_base", _FP8, ("dp-models",)),
    "pipeline_stages": (
        "diffusion-pipe",
        None,
        "no model is split into pipeline stages: several GPUs run DDP, or FSDP2 where the model does not fit one "
        "(`dit-lora launch` with accelerate_configs/fsdp2.yaml); `dit-lora plan` given the number of GPUs says "
        "which",
        ("dp",),
    ),
    # OneTrainer: keys of a model part (transformer, text_encoder) and the run's dtype
    "offload_fraction": (
        "OneTrainer",
        "blocks_to_swap",
        "a share of the transformer's blocks, not a number: 0.1 of Qwen-Image's 60 is --blocks_to_swap 6; "
        "`dit-lora plan` says the smallest that fits",
        ("ot-config", "ot-qwen"),
    ),
    "weight_dtype": (
        "OneTrainer",
        "quantize_base",
        "the transformer's FLOAT_8 is --quantize_base fp8_scaled (fp8 with torchao on CUDA 8.9+), NFLOAT_4 nf4, "
        "INT_8 int8; the text encoder's FLOAT_8 or NFLOAT_4 is --quantize_text_encoder true (nf4); BFLOAT_16 "
        "needs no flag",
        ("ot-config", "ot-qwen"),
    ),
    "train_dtype": (
        "OneTrainer",
        "mixed_precision",
        "BFLOAT_16 (its presets') is --mixed_precision bf16, dit-lora's default; FLOAT_16 (its default) needs "
        "--mixed_precision fp16 --allow_fp16",
        ("ot-config",),
    ),
}
