"""Tiny, randomly initialised Wan 2.1 / 2.2 pipelines built locally (no Hub access needed).

:func:`build_tiny_wan_pipeline` writes what ``WanPipeline.save_pretrained`` /
``WanImageToVideoPipeline.save_pretrained`` write for the published ``Wan-AI/*-Diffusers`` repos
(``model_index.json`` plus ``transformer`` [``transformer_2``], ``vae``, ``text_encoder``,
``tokenizer``, ``scheduler`` [``image_encoder``, ``image_processor``]), so code written against them
loads it the same way, offline, and LoRA target names (``attn1.to_q``, ``attn2.to_k``,
``ffn.net.0.proj`` ...) are the real ones.  Only widths and depths shrink.

==============  ==========================  ===========================================================
variant         published repo              structure (``scripts/convert_wan_to_diffusers.py``)
==============  ==========================  ===========================================================
2.1-t2v         Wan2.1-T2V-1.3B / -14B      ``WanPipeline``; transformer in/out 16; VAE z_dim 16, 8x
                                            spatial; UniPC ``flow_shift`` 3.0
2.1-i2v         Wan2.1-I2V-14B-480P/-720P   ``WanImageToVideoPipeline`` with a CLIP vision
                                            ``image_encoder`` (``CLIPVisionModelWithProjection``) and
                                            ``CLIPImageProcessor``; transformer ``in_channels`` 36 (16
                                            noise + 4 mask + 16 image latents), ``image_dim`` = the
                                            CLIP width (1280), ``added_kv_proj_dim`` = the transformer
                                            width (5120); ``flow_shift`` 3.0
2.2-ti2v        Wan2.2-TI2V-5B              ``WanPipeline`` with ``expand_timesteps`` True; the Wan 2.2
                                            VAE (z_dim 48, ``is_residual``, ``patch_size`` 2, 16x
                                            spatial, in/out 12 channels); transformer in/out 48;
                                            ``flow_shift`` 5.0
2.2-t2v-a14b    Wan2.2-T2V-A14B             ``WanPipeline``, ``transformer`` (high noise) and
                                            ``transformer_2`` (low noise), ``boundary_ratio`` 0.875;
                                            ``flow_shift`` 3.0
2.2-i2v-a14b    Wan2.2-I2V-A14B             ``WanImageToVideoPipeline``, two experts, in_channels 36,
                                            no image encoder, ``boundary_ratio`` 0.9; ``flow_shift`` 3.0
==============  ==========================  ===========================================================

The boundaries are Wan's own (``wan/configs/wan_t2v_A14B.py`` ``boundary = 0.875``,
``wan_i2v_A14B.py`` ``0.900``, Wan-Video/Wan2.2) and the conversion script's ``boundary_ratio``.  The
flow shifts are what the conversion script writes into the scheduler (16.0 FLF2V, 5.0 TI2V, else 3.0);
Wan's own samplers default higher for A14B (``sample_shift`` 12.0 T2V, 5.0 I2V).  In the 2.1 I2V
transformer the image tokens are everything in front of the last 512 text tokens
(``WanAttnProcessor``: "512 is the context length of the text encoder, hardcoded"), so prompts must
be padded to 512 (the pipelines' ``max_sequence_length`` default, Wan's ``text_len``).

Text encoder: a tiny ``UMT5EncoderModel`` (the real one is google/umt5-xxl) with CogVideoX's offline
T5-style Unigram tokenizer (:func:`dit_lora.data.synthetic.tokenizers.build_tiny_t5_tokenizer`; the real
UMT5 SentencePiece vocabulary has 256384 pieces).  The VAE's ``latents_mean`` / ``latents_std`` are
measured per channel on moving-square clips at build time (the published ones are the real VAE's), so
the diffusion targets stay at about unit variance.  Everything is fp32 by default (``dtype=``), which
keeps ``from_pretrained(path)`` runnable on CPU.

The 2.1 I2V image encoder is ``CLIPVisionModelWithProjection``, as the conversion script saves it and the
published ``model_index.json`` names it (diffusers' ``WanImageToVideoPipeline`` annotates
``CLIPVisionModel`` and logs "Expected types for image_encoder" on loading either; the pipeline reads
``hidden_states[-2]``, which both have).  Without torchvision, transformers builds and names the processor
``CLIPImageProcessorPil`` (the Hub's says ``CLIPImageProcessor``; either loads).

Geometry (:data:`TINY_WAN_GEOMETRY`): 9 frames of 64 x 64 px -> 3 latent frames of 8 x 8 (2.1 VAE) or
4 x 4 (2.2 VAE) latents -> 48 or 12 transformer tokens (patch 1 x 2 x 2).  A whole 2-step generation takes
well under a second on a CPU.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch

from dit_lora.data.synthetic.tokenizers import build_tiny_t5_tokenizer
from dit_lora.kit import tiny
from dit_lora.kit.demo_file import DemoFile

__all__ = [
    "TINY_WAN_GEOMETRY",
    "TINY_WAN_VERSION",
    "WAN_DEMO_VARIANTS",
    "build_tiny_wan_components",
    "build_tiny_wan_pipeline",
    "get_tiny_wan_config",
    "wan_pipeline_class",
]

#: each variant's configs, pipeline class and expert count, and their reasons: ``demo.json`` beside this module
DEMO = DemoFile(
    __name__,
    keys=("pipeline_class", "experts", "transformer", "vae", "scheduler", "text_encoder", "image_encoder", "pipeline"),
    shared=("geometry", "text_len"),
    optional=("image_encoder",),
    what="Wan demo variant",
)
TINY_WAN_VERSION = DEMO.read().version  # bump the file's version when configs, init or tokenizer change

# Pixel geometry the tiny pipelines are built for: frames = 4k + 1 (4x temporal VAE), height and width
# multiples of vae spatial factor x transformer patch (8 x 2 for 2.1, 16 x 2 for the 2.2 VAE).
TINY_WAN_GEOMETRY = DEMO.read().value("geometry")
WAN_DEMO_VARIANTS = tuple(DEMO.read().variants)


def _check(variant: str) -> dict[str, Any]:
    return DEMO.read().variant(variant)


def wan_pipeline_class(variant: str):
    """The diffusers pipeline class the published repo of ``variant`` uses (its ``model_index.json``)."""
    import diffusers

    return getattr(diffusers, _check(variant)["pipeline_class"])


def get_tiny_wan_config(variant: str = "2.1-t2v", layers: int = 1) -> dict[str, Any]:
    """Return the kwargs of each component for ``variant`` (a fresh copy).

    Keys ``transformer`` (WanTransformer3DModel, ``layers`` blocks; ``transformer_2`` has the same
    config), ``vae`` (AutoencoderKLWan, without the measured ``latents_mean`` / ``latents_std``),
    ``scheduler`` (UniPCMultistepScheduler), ``text_encoder`` (UMT5Config without ``vocab_size``),
    ``image_encoder`` (CLIPVisionConfig, or None) and ``pipeline`` (``boundary_ratio``,
    ``expand_timesteps``).
    """
    config = _check(variant)
    if layers < 1:
        raise ValueError(f"layers must be at least 1, got {layers}")
    del config["pipeline_class"], config["experts"]
    config["transformer"]["num_layers"] = layers
    return {"image_encoder": None, **config}


def _image_processor(config: dict[str, Any]) -> dict[str, Any]:
    """The tiny CLIP vision tower's processor (the real one: laion/CLIP-ViT-H-14-laion2B-s32B-b79K's)."""
    from transformers import CLIPImageProcessor

    size = config["image_size"]
    return {
        "image_processor": CLIPImageProcessor(size={"shortest_edge": size}, crop_size={"height": size, "width": size})
    }


def _tiny(variant: str, seed: int, dtype: torch.dtype, layers: int) -> tiny.TinyPipeline:
    """The tiny pipeline of ``variant``, every module in ``dtype``; the VAE's ``latents_mean`` / ``latents_std``
    measured per channel on moving-square clips (what the published lists are for the real VAEs)."""
    found = _check(variant)
    experts = ["transformer", "transformer_2"][: found["experts"]]
    config = get_tiny_wan_config(variant, layers)

    def tokenizer() -> Any:
        made = build_tiny_t5_tokenizer()
        made.model_max_length = DEMO.read().value("text_len")
        return made

    # the two experts differ (seeds 1 and 2), as high- and low-noise models do
    parts = [
        tiny.module(name, k, "diffusers:WanTransformer3DModel", config["transformer"], dtype=dtype)
        for k, name in enumerate(experts, start=1)
    ]
    parts.append(
        tiny.module(
            "vae",
            3,
            "diffusers:AutoencoderKLWan",
            config["vae"],
            dtype=dtype,
            then=tiny.clip_statistics(seed, TINY_WAN_GEOMETRY),
        )
    )
    ids = {"pad_token_id": "pad_token_id", "eos_token_id": "eos_token_id", "decoder_start_token_id": "pad_token_id"}
    umt5 = config["text_encoder"]
    parts.append(tiny.text_model(4, "transformers:UMT5EncoderModel", "transformers:UMT5Config", umt5, ids, dtype=dtype))
    if config["image_encoder"] is not None:
        clip, clip_config = "transformers:CLIPVisionModelWithProjection", "transformers:CLIPVisionConfig"
        parts.append(
            tiny.module("image_encoder", 5, clip, config["image_encoder"], config_class=clip_config, dtype=dtype)
        )
    return tiny.TinyPipeline(
        pipeline=f"diffusers:{found['pipeline_class']}",
        marker={
            "kind": "wan",
            "variant": variant,
            "seed": seed,
            "dtype": str(dtype).removeprefix("torch."),
            "layers": layers,
            "version": TINY_WAN_VERSION,
        },
        seed=seed,
        tokenizer=tokenizer,
        parts=tuple(parts),
        scheduler=("diffusers:UniPCMultistepScheduler", config["scheduler"]),
        pipeline_kwargs=config["pipeline"],
        processors=(lambda _: _image_processor(config["image_encoder"]))
        if config["image_encoder"] is not None
        else None,
    )


def build_tiny_wan_components(
    variant: str = "2.1-t2v", seed: int = 0, dtype: torch.dtype = torch.float32, layers: int = 1
) -> dict[str, Any]:
    """Build the Wan pipeline components of ``variant`` in memory, randomly initialised from ``seed``.

    Returns the modules the variant's pipeline takes (``transformer``, ``vae``, ``text_encoder``,
    ``tokenizer``, ``scheduler``, plus ``transformer_2`` for the A14B variants and ``image_encoder``
    / ``image_processor`` for 2.1 I2V) in eval mode and ``dtype``; ``wan_pipeline_class(variant)(
    **components, **get_tiny_wan_config(variant)["pipeline"])`` is the pipeline.  The caller's global
    torch RNG is left alone; each module is seeded separately (``seed * 1000 + k``).
    """
    return tiny.build_components(_tiny(variant, seed, dtype, layers))


def build_tiny_wan_pipeline(
    path: str | Path,
    *,
    variant: str = "2.1-t2v",
    seed: int = 0,
    dtype: torch.dtype = torch.float32,
    layers: int = 1,
) -> Path:
    """Write a randomly initialised Wan pipeline of ``variant`` to ``path`` and return ``path``.

    Saves the variant's pipeline class (:func:`wan_pipeline_class`) as ``save_pretrained`` does
    (safetensors, ``dtype`` weights, fp32 by default), plus a ``dit_lora_tiny.json`` marker.  Loads
    offline with ``<Pipeline>.from_pretrained(path)`` or per component (``subfolder=``).  Idempotent
    (same marker: nothing rewritten) and atomic (built in a sibling temporary directory and renamed);
    a stale build of ours (another variant, seed, ...) is replaced, a folder we did not build is
    refused (``FileExistsError``), as the other tiny builders do.
    """
    return tiny.build_pipeline(path, _tiny(variant, seed, dtype, layers))
