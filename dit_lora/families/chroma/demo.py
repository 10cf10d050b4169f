"""A tiny, randomly initialised Chroma pipeline built locally (no Hub access needed): a ``ChromaPipeline``
(``lodestones/Chroma1-HD``'s folder as ``save_pretrained`` writes it) with the T5 text encoder and its tokenizer
(trained offline on the demo captions), the FLUX ``AutoencoderKL`` (its shift and scale measured on a few shapes
images, as the real VAE's define them) and the scheduler config. Module names are the real ones; only widths and
depths shrink (``demo.json``)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from dit_lora.data.synthetic.tokenizers import build_tiny_t5_tokenizer
from dit_lora.families.diffusion import tiny
from dit_lora.families.diffusion.demo_file import DemoFile

#: the tiny configs and their reasons: ``demo.json`` beside this module
DEMO = DemoFile(
    __name__, keys=("resolution", "transformer", "vae", "text_encoder", "scheduler"), what="tiny Chroma variant"
)
#: bump the file's version when the configs, the init or the tokenizers change: builds of another version are rebuilt
TINY_CHROMA_VERSION = DEMO.read().version


def _tiny(variant: str, seed: int) -> tiny.TinyPipeline:
    """The tiny ``ChromaPipeline`` (fp32)."""
    config = DEMO.read().variant(variant)
    t5_ids = {"pad_token_id": "pad_token_id", "eos_token_id": "eos_token_id", "decoder_start_token_id": "pad_token_id"}
    return tiny.TinyPipeline(
        pipeline="diffusers:ChromaPipeline",
        marker={"kind": "chroma", "variant": variant, "seed": seed, "version": TINY_CHROMA_VERSION},
        seed=seed,
        tokenizer=build_tiny_t5_tokenizer,
        parts=(
            tiny.module("transformer", 1, "diffusers:ChromaTransformer2DModel", config["transformer"]),
            tiny.module("vae", 2, "diffusers:AutoencoderKL", config["vae"], then=tiny.measured_scaling(config["resolution"], 0, shift=True)),
            tiny.text_model(3, "transformers:T5EncoderModel", "transformers:T5Config", config["text_encoder"], t5_ids),
        ),
        scheduler=("diffusers:FlowMatchEulerDiscreteScheduler", config["scheduler"]),
    )  # fmt: skip


def build_tiny_chroma_components(variant: str = "hd", seed: int = 0) -> dict[str, Any]:
    """The ChromaPipeline components in memory, randomly initialised from ``seed`` (fp32, eval mode; the caller's torch
    RNG state restored; each component seeded on its own)."""
    return tiny.build_components(_tiny(variant, seed))


def build_tiny_chroma_pipeline(path: str | Path, variant: str = "hd", seed: int = 0) -> Path:
    """Write a random tiny ``ChromaPipeline`` to ``path`` and return it; idempotent (a marker names variant, seed and
    version) and atomic (built beside and renamed into place)."""
    return tiny.build_pipeline(path, _tiny(variant, seed))
