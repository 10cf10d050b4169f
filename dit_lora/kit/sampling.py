"""The validation call every square-image diffusion pipeline shares: a seeded generator on the model's device,
the run's ``--resolution`` as height and width and its validation step count, under ``no_grad``.

A family states only what differs: its prompt (text or cached embeddings), its guidance argument and extras.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import torch

if TYPE_CHECKING:
    from dit_lora.config.schema import DataOptions, ValidationOptions


def checkpoint_sampler(config: dict | None, fallback: str | None):
    """The sampler the checkpoint's scheduler ``config`` names (its ``_class_name`` in diffusers), built from that
    config; the diffusers class ``fallback`` when it names none (None: return None, the caller keeps its own)."""
    import diffusers  # slow: only at validation

    config = dict(config or {})
    cls = getattr(diffusers, str(config.get("_class_name", "")), None)
    if cls is None:
        cls = getattr(diffusers, fallback) if fallback else None
    return cls.from_config(config) if cls is not None else None


def flow_sampler(comps) -> Any:
    """The checkpoint's own ``FlowMatchEulerDiscreteScheduler`` (the run state's ``scheduler_config``: a pipeline
    computes its dynamic ``mu`` from it), else the training scheduler (components built by hand)."""
    from diffusers import FlowMatchEulerDiscreteScheduler  # slow: only at validation

    config = dict(getattr(comps.state, "scheduler_config", None) or {})
    return FlowMatchEulerDiscreteScheduler.from_config(config) if config else comps.scheduler


def square_images(
    pipe, data: DataOptions, validation: ValidationOptions, seed: int, device, *prompt: Any, **kwargs: Any
) -> list:
    """``pipe(*prompt, **kwargs)``'s images at ``data.resolution`` square with ``validation.validation_inference_steps``
    steps (the run's ``cfg.data`` and ``cfg.validation``), seeded with ``seed`` on ``device`` (one generator per
    call, so each validation draws the same noise)."""
    generator = torch.Generator(device=device).manual_seed(seed)
    with torch.no_grad():
        return pipe(
            *prompt,
            height=data.resolution,
            width=data.resolution,
            num_inference_steps=validation.validation_inference_steps,
            generator=generator,
            **kwargs,
        ).images
