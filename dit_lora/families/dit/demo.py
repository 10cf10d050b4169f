"""Tiny, randomly initialised class-conditional DiT pipelines built locally (no Hub access needed).

The folder written by :func:`build_tiny_dit_pipeline` is laid out like the real
``facebook/DiT-XL-2-256`` repo: ``model_index.json`` naming the legacy ``Transformer2DModel``
class (diffusers remaps it to ``DiTTransformer2DModel`` from ``norm_type: ada_norm_zero``) and
carrying an ``id2label`` table of 1000 ImageNet-style classes, a ``transformer`` with
``num_embeds_ada_norm: 1000`` (1000 class rows plus the null row used for classifier-free
guidance) and a learned-sigma output (``out_channels == 2 * in_channels``), an ``AutoencoderKL``
``vae`` with an 8x spatial compression and a ``DDIMScheduler`` with DiT's training betas
(linear 1e-4..0.02, 1000 steps). Weights are fp32, as in the real repo.

So code written against the real model loads the tiny one the same way, and a small dataset on it
reproduces the "10 classes on a 1000-class model" situation (OpenDiT's CIFAR-10 NaN reports).
"""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import torch

from dit_lora.families.diffusion import tiny

__all__ = ["TINY_DIT_CONFIGS", "TINY_DIT_VERSION", "build_tiny_dit_components", "build_tiny_dit_pipeline"]

# Bump whenever the configs or the init change: builds whose marker carries another version are rebuilt.
TINY_DIT_VERSION = 1

TINY_DIT_CONFIGS: dict[str, dict[str, Any]] = {
    "tiny": {
        "resolution": 64,  # sample_size 8 x the VAE's 8x compression
        "transformer": {
            "num_attention_heads": 2,
            "attention_head_dim": 16,
            "in_channels": 4,
            "out_channels": 8,  # learned sigma: epsilon and variance halves
            "num_layers": 2,
            "sample_size": 8,
            "patch_size": 2,
            "num_embeds_ada_norm": 1000,  # ImageNet classes; the table has a 1001st (null) row
        },
        "vae": {
            "block_out_channels": [8, 16, 32, 32],
            "down_block_types": ["DownEncoderBlock2D"] * 4,
            "up_block_types": ["UpDecoderBlock2D"] * 4,
            "latent_channels": 4,
            "norm_num_groups": 4,
            "layers_per_block": 1,
            "sample_size": 64,
        },
    },
    "small": {
        "resolution": 256,
        "transformer": {
            "num_attention_heads": 4,
            "attention_head_dim": 32,
            "in_channels": 4,
            "out_channels": 8,
            "num_layers": 4,
            "sample_size": 32,  # DiT-XL-2-256's latent size
            "patch_size": 2,
            "num_embeds_ada_norm": 1000,
        },
        "vae": {
            "block_out_channels": [16, 32, 64, 64],
            "down_block_types": ["DownEncoderBlock2D"] * 4,
            "up_block_types": ["UpDecoderBlock2D"] * 4,
            "latent_channels": 4,
            "norm_num_groups": 8,
            "layers_per_block": 1,
            "sample_size": 256,
        },
    },
}

# DiT's scheduler: the training betas of the paper (what facebook/DiT-* repos ship, as a DDIM config).
SCHEDULER_CONFIG = {
    "num_train_timesteps": 1000,
    "beta_start": 0.0001,
    "beta_end": 0.02,
    "beta_schedule": "linear",
    "clip_sample": False,
    "prediction_type": "epsilon",
}


def get_tiny_dit_config(size: str = "tiny") -> dict[str, Any]:
    """A deep copy of the config of ``size`` (``"tiny"`` or ``"small"``)."""
    if size not in TINY_DIT_CONFIGS:
        raise ValueError(f"unknown tiny DiT size {size!r}; choose one of {sorted(TINY_DIT_CONFIGS)}")
    return copy.deepcopy(TINY_DIT_CONFIGS[size])


def _tiny(size: str, seed: int) -> tiny.TinyPipeline:
    """The tiny DiTPipeline of ``size`` (fp32), the VAE's ``scaling_factor`` measured on the posterior means of a few
    shapes images (what 0.18215 is for the SD VAE), saved under the real repo's legacy names."""
    config = get_tiny_dit_config(size)

    def measure(vae: Any) -> None:
        with torch.no_grad():
            latents = vae.encode(tiny.shapes_pixels(config["resolution"], seed)).latent_dist.mode()
        vae.register_to_config(scaling_factor=tiny.scaling_factor(latents))

    def legacy_names(folder: Path, _components: dict[str, Any]) -> None:
        # As in facebook/DiT-XL-2-256: the legacy class name, and ImageNet-style labels in model_index.json.
        n = config["transformer"]["num_embeds_ada_norm"]

        def index(data: dict[str, Any]) -> None:
            data["transformer"] = ["diffusers", "Transformer2DModel"]
            data["id2label"] = {str(i): f"imagenet class {i}" for i in range(n)}

        tiny.rewrite_json(folder / "model_index.json", index)
        tiny.rewrite_json(
            folder / "transformer" / "config.json", lambda data: data.update(_class_name="Transformer2DModel")
        )

    return tiny.TinyPipeline(
        pipeline="diffusers:DiTPipeline",
        marker={"kind": "dit", "size": size, "seed": seed, "version": TINY_DIT_VERSION},
        seed=seed,
        parts=(
            # diffusers' class uses PyTorch's default init (no adaLN-zero), so the random model's output
            # depends on every weight, LoRA and class embedding included.
            tiny.module("transformer", 1, "diffusers:DiTTransformer2DModel", config["transformer"]),
            tiny.module("vae", 2, "diffusers:AutoencoderKL", config["vae"], then=measure),
        ),
        scheduler=("diffusers:DDIMScheduler", SCHEDULER_CONFIG),
        after_save=legacy_names,
    )


def build_tiny_dit_components(size: str = "tiny", seed: int = 0) -> dict[str, Any]:
    """The three DiTPipeline components (fp32, eval mode), randomly initialised from ``seed``.

    The caller's global torch RNG state is restored afterwards.
    """
    return tiny.build_components(_tiny(size, seed))


def build_tiny_dit_pipeline(path: str | Path, size: str = "tiny", seed: int = 0) -> Path:
    """Write a randomly initialised DiTPipeline of ``size`` to ``path`` (idempotent, atomic); return ``path``."""
    return tiny.build_pipeline(path, _tiny(size, seed))
