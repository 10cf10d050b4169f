"""Tiny, randomly initialised CogVideoX pipelines built locally (no Hub access needed).

:func:`build_tiny_cogvideox_pipeline` writes what ``CogVideoXPipeline.save_pretrained`` /
``CogVideoXImageToVideoPipeline.save_pretrained`` write (``model_index.json`` plus
``transformer``, ``vae``, ``text_encoder``, ``tokenizer``, ``scheduler``), so code written
against ``THUDM/CogVideoX-2b``, ``-5b``, ``-5b-I2V``, ``CogVideoX1.5-5B`` and
``CogVideoX1.5-5B-I2V`` loads it the same way, offline, and LoRA target names (``to_q``,
``to_k``, ``to_v``, ``to_out.0`` ...) are the real ones.

Only widths and depths shrink.  The version-specific structure follows the published
configs (and diffusers' ``CogVideoXTransformer3DModel`` / ``CogVideoXPatchEmbed``):

==========  =========================================================================
version     transformer flags
==========  =========================================================================
1.0-2b      fixed 3D sin-cos positional embedding (``use_rotary_positional_embeddings``
            False, ``use_learned_positional_embeddings`` False: the buffer is
            non-persistent, *not* learned), no RoPE; scheduler ``snr_shift_scale`` 3.0;
            VAE ``scaling_factor`` 1.15258426.  There is no 2B I2V checkpoint.
1.0-5b      RoPE (``use_rotary_positional_embeddings`` True), no additive position
            embedding for T2V; I2V (``CogVideoX-5b-I2V``) additionally has
            ``use_learned_positional_embeddings`` True (a persistent, trained
            position table: generation only at the trained resolution); scheduler
            ``snr_shift_scale`` 1.0; VAE ``scaling_factor`` 0.7.
1.5         RoPE, ``patch_size_t`` 2 (latent frames padded to a multiple of 2),
            ``patch_bias`` False, I2V has ``ofs_embed_dim`` (512 in the real model);
            scheduler ``snr_shift_scale`` 1.0; VAE ``scaling_factor`` 0.7 with
            ``invert_scale_latents`` True (the I2V pipeline *divides* the image
            latents by the scaling factor).
==========  =========================================================================

I2V models take ``in_channels = 2 * latent_channels`` (noisy video latents concatenated on
the channel axis with the first-frame image latents) and output ``latent_channels``.

The scheduler is ``CogVideoXDDIMScheduler`` with the real repos' values (scaled_linear
0.00085..0.012, v_prediction, rescale_betas_zero_snr, set_alpha_to_one, clip_sample
False, timestep_spacing "trailing").

Dtype: every component is saved in fp32 by default (``dtype=``).  The real repos store
fp16 (2B) or bf16 (5B, 1.5) weights; :data:`REAL_CHECKPOINT_DTYPES` records that so a
family can warn about it.  fp32 keeps ``from_pretrained(path)`` without ``torch_dtype``
runnable on CPU: the pipelines feed the text encoder's dtype to the transformer and the
VAE decoder, so mixed stored dtypes would fail there.

Geometry: 64 x 64 px, 9 frames -> 8 x 8 latents, 3 latent frames (VAE: 8x spatial, 4x
temporal compression; ``(9 - 1) / 4 + 1 = 3``); ``sample_height``/``sample_width`` are in
latent pixels like the real configs (60 x 90 for 480 x 720). They record the tiny model's trained
size, which dit-lora defaults to and judges requested sizes against (the real 1.5 configs' 300 x 300
is no training size; :meth:`dit_lora.families.cogvideox.info.ModelInfo.trained_size` catalogues it).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch

from dit_lora.data.synthetic.tokenizers import build_tiny_t5_tokenizer  # shared with Wan's demo; re-exported
from dit_lora.kit import tiny
from dit_lora.kit.demo_file import DemoFile

__all__ = [
    "REAL_VAE_SCALING_FACTORS",
    "COGVIDEOX_VERSIONS",
    "COGVIDEOX_TASKS",
    "REAL_CHECKPOINT_DTYPES",
    "TINY_COGVIDEOX_VERSION",
    "TINY_COGVIDEOX_GEOMETRY",
    "build_tiny_cogvideox_components",
    "build_tiny_cogvideox_pipeline",
    "build_tiny_t5_tokenizer",
    "get_tiny_cogvideox_config",
]

#: each (task, version)'s configs, the published dtypes and scaling factors, and their reasons: ``demo.json``
DEMO = DemoFile(
    __name__,
    keys=("transformer", "vae", "scheduler", "text_encoder"),
    shared=("geometry", "real_checkpoint_dtypes", "real_vae_scaling_factors"),
)
TINY_COGVIDEOX_VERSION = DEMO.read().version  # bump the file's version when configs, init or tokenizer change

COGVIDEOX_VERSIONS = ("1.0-2b", "1.0-5b", "1.5")
COGVIDEOX_TASKS = ("t2v", "i2v")

# The dtype the published checkpoints store the transformer in (THUDM/CogVideoX-2b was
# trained in fp16; 5B and 1.5 in bf16).  The tiny builds are fp32 (see module docstring).
REAL_CHECKPOINT_DTYPES = DEMO.read().value("real_checkpoint_dtypes")

# Pixel geometry the tiny pipelines are built for.
TINY_COGVIDEOX_GEOMETRY = DEMO.read().value("geometry")

# The published VAEs' scaling factors (the tiny VAE's is measured: _tiny).
REAL_VAE_SCALING_FACTORS = DEMO.read().value("real_vae_scaling_factors")


def _check(task: str, version: str) -> None:
    if task not in COGVIDEOX_TASKS:
        raise ValueError(f"unknown CogVideoX task {task!r}; choose from {COGVIDEOX_TASKS}")
    if version not in COGVIDEOX_VERSIONS:
        raise ValueError(f"unknown CogVideoX version {version!r}; choose from {COGVIDEOX_VERSIONS}")
    if task == "i2v" and version == "1.0-2b":
        raise ValueError("there is no CogVideoX-2b image-to-video checkpoint; use version '1.0-5b' or '1.5' for i2v")


def get_tiny_cogvideox_config(task: str = "t2v", version: str = "1.0-5b") -> dict[str, Any]:
    """Return the kwargs of each component for ``(task, version)`` (a fresh copy).

    Keys ``transformer`` (CogVideoXTransformer3DModel), ``vae`` (AutoencoderKLCogVideoX,
    without ``scaling_factor``, which is measured at build time), ``scheduler``
    (CogVideoXDDIMScheduler) and ``text_encoder`` (T5Config, without ``vocab_size``).
    """
    _check(task, version)
    return DEMO.read().variant(f"{task} {version}")


def _tiny(task: str, version: str, seed: int, dtype: torch.dtype) -> tiny.TinyPipeline:
    """The tiny CogVideoX pipeline of ``(task, version)``, every module in ``dtype``; the VAE's ``scaling_factor`` is
    measured on a few static shapes clips (the SD/CogVideoX definition; the real VAEs' are 1.15258426 / 0.7)."""
    _check(task, version)
    config = get_tiny_cogvideox_config(task, version)
    g = TINY_COGVIDEOX_GEOMETRY

    def measure(vae: Any) -> None:
        frames = tiny.shapes_pixels(g["height"], seed, n=2)  # each picture held still for the whole clip
        clips = frames[:, :, None].expand(2, 3, g["num_frames"], g["height"], g["width"])
        with torch.no_grad():
            latents = vae.encode(clips).latent_dist.mean
        vae.register_to_config(scaling_factor=tiny.scaling_factor(latents))

    t5_ids = {"pad_token_id": "pad_token_id", "eos_token_id": "eos_token_id"}
    # a key of the published config that T5Config (transformers 5) no longer names but keeps and saves
    t5_ids["decoder_start_token_id"] = "pad_token_id"
    pipeline = "CogVideoXImageToVideoPipeline" if task == "i2v" else "CogVideoXPipeline"
    return tiny.TinyPipeline(
        pipeline=f"diffusers:{pipeline}",
        marker={
            "kind": "cogvideox",
            "task": task,
            "cogvideox_version": version,
            "seed": seed,
            "dtype": str(dtype).removeprefix("torch."),
            "version": TINY_COGVIDEOX_VERSION,
        },
        seed=seed,
        tokenizer=build_tiny_t5_tokenizer,
        parts=(
            tiny.module("transformer", 1, "diffusers:CogVideoXTransformer3DModel", config["transformer"], dtype=dtype),
            tiny.module("vae", 2, "diffusers:AutoencoderKLCogVideoX", config["vae"], dtype=dtype, then=measure),
            tiny.text_model(
                3, "transformers:T5EncoderModel", "transformers:T5Config", config["text_encoder"], t5_ids, dtype=dtype
            ),
        ),
        scheduler=("diffusers:CogVideoXDDIMScheduler", config["scheduler"]),
    )


def build_tiny_cogvideox_components(
    task: str = "t2v", version: str = "1.0-5b", seed: int = 0, dtype: torch.dtype = torch.float32
) -> dict[str, Any]:
    """Build the five CogVideoX pipeline components in memory, randomly initialised from ``seed``.

    Returns ``{"transformer", "vae", "text_encoder", "tokenizer", "scheduler"}`` in eval mode
    and ``dtype``.  The caller's global torch RNG state is restored afterwards; each component
    is seeded separately (``seed * 1000 + k``).
    """
    return tiny.build_components(_tiny(task, version, seed, dtype))


def build_tiny_cogvideox_pipeline(
    path: str | Path,
    *,
    task: str = "t2v",
    version: str = "1.0-5b",
    seed: int = 0,
    dtype: torch.dtype = torch.float32,
) -> Path:
    """Write a randomly initialised CogVideoX pipeline to ``path`` and return ``path``.

    ``task="t2v"`` saves a ``CogVideoXPipeline``, ``"i2v"`` a
    ``CogVideoXImageToVideoPipeline`` (safetensors, ``dtype`` weights, fp32 by default), plus a
    ``dit_lora_tiny.json`` marker.  Loads offline with ``<Pipeline>.from_pretrained(path)`` or
    per component (``subfolder=``).  Idempotent (same marker -> nothing rewritten) and atomic
    (built in a sibling temporary directory and renamed), like the tiny Sana builder.
    """
    return tiny.build_pipeline(path, _tiny(task, version, seed, dtype))
