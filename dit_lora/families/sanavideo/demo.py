"""Tiny, randomly initialised SANA-Video pipelines built locally (no Hub access needed).

:func:`build_tiny_sanavideo_pipeline` writes what ``SanaVideoPipeline.save_pretrained`` (``task="t2v"``) or
``SanaImageToVideoPipeline.save_pretrained`` (``"i2v"``) write for diffusers' conversion of the 2B 480p release
(``scripts/convert_sana_video_to_diffusers.py``): ``model_index.json`` plus ``transformer``
(``SanaVideoTransformer3DModel``), ``vae`` (``AutoencoderKLWan``, the Wan 2.1 VAE), ``text_encoder``
(``Gemma2Model``), ``tokenizer`` (Gemma's BPE shape) and ``scheduler`` (text-to-video: ``DPMSolverMultistepScheduler``
with flow sigmas, image-to-video: ``FlowMatchEulerDiscreteScheduler``, both shifted by 8.0 as the script writes), so
LoRA target names (``attn1.to_q``, ``attn2.to_k`` ...) are the real ones. Only widths and depths shrink; the
transformer keeps ``sample_size`` 30 and patch ``(1, 2, 2)`` (call the pipelines with
``use_resolution_binning=False`` to generate at the tiny size rather than the 480p table's).

The VAE's ``latents_mean`` / ``latents_std`` are measured per channel on moving-square clips at build time (the
published ones are the real VAE's), so the diffusion targets stay at about unit variance. Geometry
(:data:`TINY_GEOMETRY`): 9 frames of 64 x 64 px -> 3 latent frames of 8 x 8 -> 48 tokens. Weights are fp32, so
``from_pretrained(path)`` runs on a CPU.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from dit_lora.data.synthetic.shapes import COLORS
from dit_lora.kit import tiny
from dit_lora.kit.demo_file import DemoFile

#: the tiny model's configs, the tasks' pipelines and schedulers, and their reasons: ``demo.json`` beside this module
DEMO = DemoFile(
    __name__,
    keys=("pipeline", "scheduler"),
    shared=("geometry", "sampling_shift", "transformer", "vae", "text_encoder"),
)
TINY_VERSION = DEMO.read().version  # bump the file's version when configs, init or tokenizer change
TINY_GEOMETRY = DEMO.read().value("geometry")
#: the shift diffusers' conversion script writes into either scheduler
SAMPLING_SHIFT = DEMO.read().value("sampling_shift")
PIPELINES = {task: variant["pipeline"] for task, variant in DEMO.read().table().items()}
#: each task's scheduler as the conversion script writes it, both shifted by :data:`SAMPLING_SHIFT`
_SCHEDULERS: dict[str, tuple[str, dict[str, Any]]] = {
    task: (variant["scheduler"]["class"], variant["scheduler"]["config"])
    for task, variant in DEMO.read().table().items()
}


def get_tiny_sanavideo_config() -> dict[str, Any]:
    """The kwargs of the tiny transformer, VAE (without the measured statistics) and Gemma2Config (without the
    vocabulary size), a fresh copy."""
    return {key: DEMO.read().value(key) for key in ("transformer", "vae", "text_encoder")}


def _tokenizer():
    """Gemma's tokenizer shape, its merges trained on the demo captions and SanaVideoPipeline's instruction."""
    words = (list(COLORS) + ["square", "moving", "left", "right", "top", "bottom", "to"]) * 8
    return tiny.instruction_tokenizer("SanaVideoPipeline", words)


def _scheduler(task: str) -> Any:
    """The scheduler of ``task`` as the conversion script writes it."""
    cls, config = _SCHEDULERS[task]
    return tiny.resolve(cls)(**config)


def _tiny(task: str, seed: int, layers: int) -> tiny.TinyPipeline:
    """The tiny pipeline of ``task`` (fp32); the VAE's ``latents_mean`` / ``latents_std`` measured per channel on
    moving-square clips (what the published lists are for the real VAE)."""
    if task not in PIPELINES:
        raise ValueError(f"unknown SANA-Video demo task {task!r}; choose from {', '.join(PIPELINES)}")
    config = get_tiny_sanavideo_config()
    transformer = {**config["transformer"], "num_layers": layers}
    gemma_ids = {key: key for key in ("pad_token_id", "bos_token_id", "eos_token_id")}
    gemma = ("transformers:Gemma2Model", "transformers:Gemma2Config", config["text_encoder"], gemma_ids)
    return tiny.TinyPipeline(
        pipeline=f"diffusers:{PIPELINES[task]}",
        marker={"kind": "sanavideo", "task": task, "seed": seed, "layers": layers, "version": TINY_VERSION},
        seed=seed,
        tokenizer=_tokenizer,
        parts=(
            tiny.module("transformer", 1, "diffusers:SanaVideoTransformer3DModel", transformer),
            tiny.module(
                "vae", 2, "diffusers:AutoencoderKLWan", config["vae"], then=tiny.clip_statistics(seed, TINY_GEOMETRY)
            ),
            tiny.text_model(3, *gemma),
        ),
        scheduler=_SCHEDULERS[task],
    )


def build_tiny_sanavideo_components(task: str = "t2v", seed: int = 0, layers: int = 2) -> dict[str, Any]:
    """The five pipeline components, randomly initialised from ``seed`` (each module seeded on its own, the caller's
    RNG left alone), fp32 and in eval mode; ``task`` picks the scheduler as the conversion script does."""
    return tiny.build_components(_tiny(task, seed, layers))


def build_tiny_sanavideo_pipeline(path: str | Path, *, task: str = "t2v", seed: int = 0, layers: int = 2) -> Path:
    """Write a randomly initialised SANA-Video pipeline of ``task`` (``t2v``/``i2v``) to ``path`` and return it.

    Idempotent (same marker: nothing rewritten) and atomic (built in a sibling temporary folder and renamed); a
    folder we did not build is refused (``FileExistsError``), as the other tiny builders do."""
    return tiny.build_pipeline(path, _tiny(task, seed, layers))
