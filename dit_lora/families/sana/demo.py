"""Tiny, randomly initialised Sana pipelines built locally (no Hub access needed).

The layout written by :func:`build_tiny_sana_pipeline` mirrors the real
``Efficient-Large-Model/Sana_*_BF16_diffusers`` repos: ``model_index.json`` plus the
``transformer`` (SanaTransformer2DModel, bf16), ``text_encoder`` (Gemma2Model, bf16), ``vae``
(AutoencoderDC, fp32), ``scheduler`` (FlowMatchEulerDiscreteScheduler, shift 3.0) and
``tokenizer`` (GemmaTokenizer) folders, so code written against the real model loads it the
same way, offline, and LoRA target names (``to_q``, ``to_k``, ``to_v``, ``to_out.0``,
``caption_projection.linear_1`` ...) are the real ones.

Two sizes: ``"tiny"`` (64 px; a train step takes milliseconds, for tests and the demo) and
``"small"`` (256 px; big enough to be compute-bound, for CPU benchmarks).
"""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import torch

from dit_lora.data.synthetic.shapes import COLORS, SHAPES, SHAPES_VALIDATION_PROMPT
from dit_lora.data.synthetic.tokenizers import (  # shared with the T5 demo tokenizer; re-exported
    TOKENIZER_CORPUS_EXTRA,
    build_tiny_gemma_tokenizer,
)
from dit_lora.families.diffusion import tiny

__all__ = [
    "TINY_SANA_CONFIGS",
    "TINY_SANA_VERSION",
    "TOKENIZER_CORPUS_EXTRA",
    "build_tiny_sana_components",
    "build_tiny_sana_pipeline",
    "build_tiny_tokenizer",
    "get_tiny_sana_config",
]

# Bump whenever the configs, the init or the tokenizer change: cached builds whose marker
# carries another version are rebuilt.
TINY_SANA_VERSION = 1
_BF16 = torch.bfloat16

# --------------------------------------------------------------------------------------
# Configs.  Structure follows the real Sana 600M/1600M configs (linear self-attention,
# cross-attention whose inner dim equals the model dim, GLUMBConv mlp_ratio 2.5, no
# positional embedding: interpolation_scale None, patch_size 1) and DC-AE (ResBlocks then
# EfficientViT blocks, "Conv" down / "interpolate" up sampling, batch-norm/relu then
# rms-norm/silu decoder stages, no layers in the first stage).  Only widths/depths shrink.
#
# sample_size must be one of 16/32/64/128: SanaPipeline picks its resolution-binning table
# from it and raises "Invalid sample size" otherwise.  16 is the 512 px table, so a plain
# `pipe(height=64, width=64)` generates at 512 px and resizes down; pass
# `use_resolution_binning=False` to generate at 64 px directly.
# --------------------------------------------------------------------------------------
TINY_SANA_CONFIGS: dict[str, dict[str, Any]] = {
    "tiny": {
        "resolution": 64,
        "transformer": {
            "in_channels": 4,
            "out_channels": 4,
            "num_attention_heads": 2,
            "attention_head_dim": 16,
            "num_layers": 2,
            "num_cross_attention_heads": 2,
            "cross_attention_head_dim": 16,
            "cross_attention_dim": 32,
            # != model dim (32) on purpose, like the real 2304 -> 2240, so a shape bug in
            # caption handling cannot hide behind a square projection.
            "caption_channels": 48,
            "mlp_ratio": 2.5,
            "attention_bias": False,
            "sample_size": 16,
            "patch_size": 1,
            "norm_elementwise_affine": False,
            "norm_eps": 1e-6,
            "interpolation_scale": None,
        },
        "vae": {
            "in_channels": 3,
            "latent_channels": 4,
            "attention_head_dim": 8,
            "encoder_block_types": ["ResBlock", "ResBlock", "EfficientViTBlock", "EfficientViTBlock"],
            "decoder_block_types": ["ResBlock", "ResBlock", "EfficientViTBlock", "EfficientViTBlock"],
            "encoder_block_out_channels": [8, 16, 32, 32],  # 4 stages -> 8x spatial compression
            "decoder_block_out_channels": [8, 16, 32, 32],
            "encoder_layers_per_block": [0, 1, 1, 1],
            "decoder_layers_per_block": [0, 1, 1, 1],
            "encoder_qkv_multiscales": [[], [], [5], [5]],
            "decoder_qkv_multiscales": [[], [], [5], [5]],
            "upsample_block_type": "interpolate",
            "downsample_block_type": "Conv",
            "decoder_norm_types": ["batch_norm", "batch_norm", "rms_norm", "rms_norm"],
            "decoder_act_fns": ["relu", "relu", "silu", "silu"],
        },
        "text_encoder": {
            "hidden_size": 48,  # == transformer caption_channels
            "intermediate_size": 96,
            "num_hidden_layers": 2,
            "num_attention_heads": 2,
            "num_key_value_heads": 1,  # grouped-query attention like gemma-2-2b (8 q / 4 kv)
            "head_dim": 16,
            "query_pre_attn_scalar": 16,  # == head_dim, as in gemma-2-2b (256 / 256)
            "max_position_embeddings": 2048,
        },
    },
    "small": {
        "resolution": 256,
        "transformer": {
            "in_channels": 8,
            "out_channels": 8,
            "num_attention_heads": 10,
            "attention_head_dim": 32,  # the real head dim
            "num_layers": 5,
            "num_cross_attention_heads": 5,
            "cross_attention_head_dim": 64,
            "cross_attention_dim": 320,
            "caption_channels": 256,
            "mlp_ratio": 2.5,
            "attention_bias": False,
            "sample_size": 16,
            "patch_size": 1,
            "norm_elementwise_affine": False,
            "norm_eps": 1e-6,
            "interpolation_scale": None,
        },
        "vae": {
            "in_channels": 3,
            "latent_channels": 8,
            "attention_head_dim": 16,
            "encoder_block_types": ["ResBlock", "ResBlock", "EfficientViTBlock", "EfficientViTBlock"],
            "decoder_block_types": ["ResBlock", "ResBlock", "EfficientViTBlock", "EfficientViTBlock"],
            "encoder_block_out_channels": [16, 32, 64, 64],
            "decoder_block_out_channels": [16, 32, 64, 64],
            "encoder_layers_per_block": [0, 1, 1, 1],
            "decoder_layers_per_block": [0, 1, 1, 1],
            "encoder_qkv_multiscales": [[], [], [5], [5]],
            "decoder_qkv_multiscales": [[], [], [5], [5]],
            "upsample_block_type": "interpolate",
            "downsample_block_type": "Conv",
            "decoder_norm_types": ["batch_norm", "batch_norm", "rms_norm", "rms_norm"],
            "decoder_act_fns": ["relu", "relu", "silu", "silu"],
        },
        "text_encoder": {
            "hidden_size": 256,
            "intermediate_size": 512,
            "num_hidden_layers": 2,
            "num_attention_heads": 4,
            "num_key_value_heads": 2,
            "head_dim": 64,
            "query_pre_attn_scalar": 64,
            "max_position_embeddings": 2048,
        },
    },
}

# The scheduler of the real Sana diffusers repos (flow matching, shift 3.0).
_SCHEDULER_CONFIG = {"num_train_timesteps": 1000, "shift": 3.0}


def get_tiny_sana_config(size: str = "tiny") -> dict[str, Any]:
    """Return a deep copy of the config dict for ``size`` (``"tiny"`` or ``"small"``).

    Keys: ``resolution`` (pixels), ``transformer``, ``vae``, ``text_encoder`` (kwargs for
    SanaTransformer2DModel, AutoencoderDC and Gemma2Config; the text encoder's vocab size and
    the VAE's scaling factor are filled in at build time) and ``scheduler``.
    """
    if size not in TINY_SANA_CONFIGS:
        raise ValueError(f"unknown tiny Sana size {size!r}; choose from {sorted(TINY_SANA_CONFIGS)}")
    config = copy.deepcopy(TINY_SANA_CONFIGS[size])
    config["scheduler"] = dict(_SCHEDULER_CONFIG)
    return config


def _default_complex_human_instruction() -> list[str]:
    # Read it from the installed SanaPipeline so the vocabulary follows diffusers' default.
    import inspect

    from diffusers import SanaPipeline

    param = inspect.signature(SanaPipeline.__call__).parameters.get("complex_human_instruction")
    default = None if param is None else param.default
    return list(default) if isinstance(default, (list, tuple)) else []


def _tokenizer_corpus() -> list[str]:
    text = " ".join(_default_complex_human_instruction())
    words = text.split() + TOKENIZER_CORPUS_EXTRA.split() + SHAPES_VALIDATION_PROMPT.split()
    # Demo words are repeated so BPE merges them into single tokens even if they are rare
    # in the instruction text.
    words += (list(COLORS) + list(SHAPES) + ["background", "on", "a"]) * 8
    return words


def build_tiny_tokenizer():
    """Sana's demo tokenizer: :func:`~dit_lora.data.synthetic.tokenizers.build_tiny_gemma_tokenizer` trained on the
    demo captions and SanaPipeline's default ``complex_human_instruction``."""
    return build_tiny_gemma_tokenizer(_tokenizer_corpus())


def _tiny(size: str, seed: int) -> tiny.TinyPipeline:
    """The tiny SanaPipeline of ``size``: transformer and Gemma-2 text encoder in bf16, the DC-AE in fp32 (the dtypes
    of the real BF16 repos), the DC-AE's ``scaling_factor`` measured as DC-AE defines it (the real one: 0.41407)."""
    config = get_tiny_sana_config(size)
    if config["text_encoder"]["hidden_size"] != config["transformer"]["caption_channels"]:
        raise ValueError("text encoder hidden_size must equal transformer caption_channels")
    if config["vae"]["latent_channels"] != config["transformer"]["in_channels"]:
        raise ValueError("VAE latent_channels must equal transformer in_channels")

    def measure(vae: Any) -> None:
        with torch.no_grad():
            latents = vae.encode(tiny.shapes_pixels(config["resolution"], seed)).latent
        vae.register_to_config(scaling_factor=tiny.scaling_factor(latents))

    gemma_ids = {key: key for key in ("pad_token_id", "bos_token_id", "eos_token_id")}
    return tiny.TinyPipeline(
        pipeline="diffusers:SanaPipeline",
        marker={"kind": "sana", "size": size, "seed": seed, "version": TINY_SANA_VERSION},
        seed=seed,
        tokenizer=build_tiny_tokenizer,
        parts=(
            tiny.module("transformer", 1, "diffusers:SanaTransformer2DModel", config["transformer"], dtype=_BF16),
            tiny.module("vae", 2, "diffusers:AutoencoderDC", config["vae"], then=measure),
            tiny.text_model(
                3,
                "transformers:Gemma2Model",
                "transformers:Gemma2Config",
                config["text_encoder"],
                gemma_ids,
                dtype=_BF16,
            ),
        ),
        scheduler=("diffusers:FlowMatchEulerDiscreteScheduler", config["scheduler"]),
    )


def build_tiny_sana_components(size: str = "tiny", seed: int = 0) -> dict[str, Any]:
    """Build the five SanaPipeline components in memory, randomly initialised from ``seed``.

    Returns ``{"transformer", "text_encoder", "vae", "scheduler", "tokenizer"}`` with the
    transformer and text encoder in bf16 and the VAE in fp32 (the dtypes of the real BF16
    repos), all in eval mode.  The caller's global torch RNG state is restored afterwards.
    Each component is seeded separately (``seed * 1000 + k``) so that changing one config
    does not change the weights of the others.
    """
    return tiny.build_components(_tiny(size, seed))


def build_tiny_sana_pipeline(path: str | Path, size: str = "tiny", seed: int = 0) -> Path:
    """Write a randomly initialised SanaPipeline of ``size`` to ``path`` and return ``path``.

    The directory is what ``SanaPipeline.save_pretrained`` writes (safetensors, transformer
    and text encoder in bf16, VAE in fp32) plus a ``dit_lora_tiny.json`` marker.  It loads
    offline with ``SanaPipeline.from_pretrained(path)`` or per component (``subfolder=``).
    Idempotent: if the marker matches ``(size, seed, version)`` nothing is rewritten.
    Atomic: built in a temporary sibling directory and renamed into place, so concurrent
    callers (e.g. two ranks of a distributed test) are safe.
    """
    return tiny.build_pipeline(path, _tiny(size, seed))
