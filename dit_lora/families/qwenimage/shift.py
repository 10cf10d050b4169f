"""The training sigmas of Qwen-Image: a density draw ``u`` in [0, 1], shifted per resolution as the pipeline shifts.

At inference ``QwenImagePipeline`` computes ``mu = calculate_shift(image_seq_len, base_image_seq_len,
max_image_seq_len, base_shift, max_shift)`` from the packed latent's token count and the scheduler config, and
``FlowMatchEulerDiscreteScheduler.set_timesteps(sigmas=..., mu=mu)`` maps each sigma through ``time_shift``:
``exp(mu) / (exp(mu) + (1/sigma - 1))`` (``time_shift_type`` exponential, Qwen-Image's) or
``mu / (mu + (1/sigma - 1))`` (linear). Training draws ``u`` from the run's density and maps it the same way
(``dynamic``: musubi-tuner's ``qwen_shift``, which takes the same line through (256, 0.5) and (8192, 0.9)), by a fixed
shift ``s * u / (1 + (s - 1) u)`` (``fixed``), or not at all (``none``: diffusers' DreamBooth script, whose scheduler
has ``use_dynamic_shifting`` and so an unshifted table). The inference-only ``shift_terminal`` stretch is not applied
(neither reference trainer applies it). The factor and the shift are the kit's
(:func:`~dit_lora.modeling.flow_matching.dynamic_shift`, :func:`~dit_lora.modeling.flow_matching.shifted_sigmas`).
"""

from __future__ import annotations

from typing import Any

from dit_lora.modeling.flow_matching import dynamic_shift, shifted_sigmas


def image_seq_len(latent_height: int, latent_width: int, patch_size: int = 2) -> int:
    """Tokens of one packed latent image: ``(h / 2) * (w / 2)`` (QwenImagePipeline's ``latents.shape[1]``)."""
    return (latent_height // patch_size) * (latent_width // patch_size)


def shift_factor(mode: str, seq_len: int, scheduler_config: dict[str, Any], fixed_shift: float) -> float:
    """The factor ``e`` of ``e u / (e u + 1 - u)``: ``exp(mu)`` (or ``mu`` for a linear ``time_shift_type``) for
    ``dynamic``, the fixed shift for ``fixed``, 1 for ``none``."""
    if mode == "none":
        return 1.0
    if mode == "fixed":
        return float(fixed_shift)
    if mode != "dynamic":
        raise ValueError(f"unknown shift mode {mode!r}")
    return dynamic_shift(seq_len, scheduler_config)


__all__ = ["image_seq_len", "shift_factor", "shifted_sigmas"]
