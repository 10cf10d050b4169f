"""Tiny, randomly initialised Sana pipelines built locally (no Hub access needed).

The layout written by :func:`build_tiny_sana_pipeline` mirrors the real
``Efficient-Large-Model/Sana_*_BF16_diffusers`` repos: ``model_index.json`` plus the
``transformer`` (SanaTransformer2DModel, bf16), ``text_encoder`` (Gemma2Model, bf16), ``vae``
(AutoencoderDC, fp32), ``scheduler`` (FlowMatchEulerDiscreteScheduler, shift 3.0) and
``tokenizer`` (GemmaTokenizer) folders, so code written against the real model loads it the
same way, offline, and LoRA target names (``to_q``, ``to_k``, ``to_v``, ``to_out.0``,
``caption_projection.linear_1`` ...) are the real ones.

Two sizes: ``"tiny"`` (64 px; a train step takes milliseconds, for tests and the demo) and
``"small"`` (256 px; big enough to be compute-bound, for CPU benchmarks), stated in ``demo.json`` with the
reasons for their values.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch

from dit_lora.data.synthetic.shapes import COLORS, SHAPES, SHAPES_VALIDATION_PROMPT
from dit_lora.data.synthetic.tokenizers import TOKENIZER_CORPUS_EXTRA  # shared with the T5 demo tokenizer; re-exported
from dit_lora.kit import tiny
from dit_lora.kit.demo_file import DemoFile

__all__ = [
    "TINY_SANA_CONFIGS",
    "TINY_SANA_VERSION",
    "TOKENIZER_CORPUS_EXTRA",
    "build_tiny_sana_components",
    "build_tiny_sana_pipeline",
    "build_tiny_tokenizer",
    "get_tiny_sana_config",
]

#: the tiny sizes' configs, their reasons and the scheduler's: ``demo.json`` beside this module
DEMO = DemoFile(
    __name__, keys=("resolution", "transformer", "vae", "text_encoder"), shared=("scheduler",), what="tiny Sana size"
)
# Bump the file's version whenever the configs, the init or the tokenizer change: cached builds whose marker
# carries another version are rebuilt.
TINY_SANA_VERSION = DEMO.read().version
#: ``{"tiny": {"resolution", "transformer", "vae", "text_encoder"}, "small": ...}``, as ``demo.json`` states them
TINY_SANA_CONFIGS: dict[str, dict[str, Any]] = DEMO.read().table()
_BF16 = torch.bfloat16


def get_tiny_sana_config(size: str = "tiny") -> dict[str, Any]:
    """Return a deep copy of the config dict for ``size`` (``"tiny"`` or ``"small"``).

    Keys: ``resolution`` (pixels), ``transformer``, ``vae``, ``text_encoder`` (kwargs for
    SanaTransformer2DModel, AutoencoderDC and Gemma2Config; the text encoder's vocab size and
    the VAE's scaling factor are filled in at build time) and ``scheduler``.
    """
    return {**DEMO.read().variant(size), "scheduler": DEMO.read().value("scheduler")}


def build_tiny_tokenizer():
    """Sana's demo tokenizer: :func:`~dit_lora.kit.tiny.instruction_tokenizer` trained on the demo
    captions and SanaPipeline's default ``complex_human_instruction``."""
    words = SHAPES_VALIDATION_PROMPT.split() + (list(COLORS) + list(SHAPES) + ["background", "on", "a"]) * 8
    return tiny.instruction_tokenizer("SanaPipeline", words)


def _tiny(size: str, seed: int) -> tiny.TinyPipeline:
    """The tiny SanaPipeline of ``size``: transformer and Gemma-2 text encoder in bf16, the DC-AE in fp32 (the dtypes
    of the real BF16 repos), the DC-AE's ``scaling_factor`` measured as DC-AE defines it (the real one: 0.41407)."""
    config = get_tiny_sana_config(size)
    if config["text_encoder"]["hidden_size"] != config["transformer"]["caption_channels"]:
        raise ValueError("text encoder hidden_size must equal transformer caption_channels")
    if config["vae"]["latent_channels"] != config["transformer"]["in_channels"]:
        raise ValueError("VAE latent_channels must equal transformer in_channels")

    measure = tiny.measured_scaling(config["resolution"], seed)  # the VAE's scaling_factor, on shapes

    gemma_ids = {key: key for key in ("pad_token_id", "bos_token_id", "eos_token_id")}
    return tiny.described(
        DEMO,
        "SanaPipeline",
        seed,
        config,
        ("size", size),
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
