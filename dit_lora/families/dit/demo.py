"""Tiny, randomly initialised class-conditional DiT pipelines built locally (no Hub access needed).

The folder written by :func:`build_tiny_dit_pipeline` is laid out like the real ``facebook/DiT-XL-2-256`` repo, in
fp32 as it is: ``model_index.json`` names the legacy ``Transformer2DModel`` class (diffusers remaps it to
``DiTTransformer2DModel`` from ``norm_type: ada_norm_zero``) and carries an ``id2label`` table of 1000
ImageNet-style classes; ``demo.json`` says why each config value is what it is (1000 class rows and the null row for
guidance, a learned-sigma output, the VAE's 8x compression, DiT's training betas as a ``DDIMScheduler`` config).

So code written against the real model loads the tiny one the same way, and a small dataset on it
reproduces the "10 classes on a 1000-class model" situation (OpenDiT's CIFAR-10 NaN reports).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from dit_lora.kit import tiny
from dit_lora.kit.demo_file import DemoFile

__all__ = ["TINY_DIT_CONFIGS", "TINY_DIT_VERSION", "build_tiny_dit_components", "build_tiny_dit_pipeline"]

#: the sizes' configs, their reasons and the scheduler's: ``demo.json`` beside this module
DEMO = DemoFile(__name__, keys=("resolution", "transformer", "vae"), shared=("scheduler",), what="tiny DiT size")
#: the marker's version (``demo.json``'s: builds whose marker carries another are rebuilt)
TINY_DIT_VERSION = DEMO.read().version
#: ``{"tiny": {"resolution", "transformer", "vae"}, "small": ...}``, as ``demo.json`` states them
TINY_DIT_CONFIGS: dict[str, dict[str, Any]] = DEMO.read().table()


def get_tiny_dit_config(size: str = "tiny") -> dict[str, Any]:
    """A deep copy of the config of ``size`` (``"tiny"`` or ``"small"``)."""
    return DEMO.read().variant(size)


def _tiny(size: str, seed: int) -> tiny.TinyPipeline:
    """The tiny DiTPipeline of ``size`` (fp32), the VAE's ``scaling_factor`` measured on the posterior means of a few
    shapes images (what 0.18215 is for the SD VAE), saved under the real repo's legacy names."""
    config = get_tiny_dit_config(size)

    measure = tiny.measured_scaling(config["resolution"], seed)  # the VAE's scaling_factor, on shapes

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
        scheduler=("diffusers:DDIMScheduler", DEMO.read().value("scheduler")),
        after_save=legacy_names,
    )


def build_tiny_dit_components(size: str = "tiny", seed: int = 0) -> dict[str, Any]:
    """The three DiTPipeline components (fp32, eval mode), randomly initialised from ``seed``
    (:func:`~dit_lora.kit.tiny.build_components`: the caller's RNG state is kept)."""
    return tiny.build_components(_tiny(size, seed))


def build_tiny_dit_pipeline(path: str | Path, size: str = "tiny", seed: int = 0) -> Path:
    """Write a randomly initialised DiTPipeline of ``size`` to ``path`` (idempotent, atomic); return ``path``."""
    return tiny.build_pipeline(path, _tiny(size, seed))
