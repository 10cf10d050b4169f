"""Rectified-flow (flow-matching) training pieces shared by the families that train that way.

The rules are those of diffusers' SD3 / Sana DreamBooth-LoRA training scripts
(``examples/dreambooth/train_dreambooth_lora_sana.py``), with the SD3 paper's timestep densities
(Esser et al. 2024, https://huggingface.co/papers/2403.03206):

- the training tables are ``FlowMatchEulerDiscreteScheduler``'s ``sigmas`` / ``timesteps`` built with the
  checkpoint's flow shift (:func:`training_scheduler`, :func:`flow_tables`);
- a sample's table index is ``floor(u * num_train_timesteps)`` with ``u`` drawn from
  ``diffusers.training_utils.compute_density_for_timestep_sampling`` (uniform, logit-normal or ``mode``)
  (:func:`sample_indices`);
- ``x_t = (1 - sigma) x0 + sigma eps`` (:func:`noisy_latents`), the model predicts the velocity
  ``eps - x0`` (:func:`velocity_target`);
- the per-sample MSE is weighted by ``diffusers.training_utils.compute_loss_weighting_for_sd3``
  (``sigma_sqrt``, ``cosmap``, or 1) and averaged over the batch (:func:`loss_weighting`, :func:`weighted_mse`).

:func:`draw` bundles noise, indices, sigmas and timesteps in the order Sana's loss has always drawn them
(noise first, then ``u``, from the same generator), so a run resumed from a checkpoint repeats it bit for bit.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Literal

import torch

__all__ = [
    "FlowDraw",
    "density_draws",
    "draw",
    "dynamic_mu",
    "dynamic_shift",
    "flow_tables",
    "loss_weighting",
    "noisy_latents",
    "sample_indices",
    "scheduler_shift",
    "shifted_sigmas",
    "training_scheduler",
    "velocity_target",
    "weighted_mse",
]


#: FlowMatchEulerDiscreteScheduler's dynamic-shift line, used where a scheduler config leaves a value out
_SHIFT_LINE = {"base_image_seq_len": 256, "max_image_seq_len": 4096, "base_shift": 0.5, "max_shift": 1.15}


def dynamic_mu(seq_len: int, scheduler_config: dict[str, Any]) -> float:
    """``mu`` at ``seq_len`` image tokens on the line through ``(base_image_seq_len, base_shift)`` and
    ``(max_image_seq_len, max_shift)``, extended linearly beyond: the pipelines' ``calculate_shift`` (in its order of
    operations) with the scheduler config's values and the scheduler's defaults."""
    x1, x2, y1, y2 = (scheduler_config.get(k, default) for k, default in _SHIFT_LINE.items())
    slope = (y2 - y1) / (x2 - x1)
    return seq_len * slope + (y1 - slope * x1)


def dynamic_shift(seq_len: int, scheduler_config: dict[str, Any]) -> float:
    """The factor ``s`` of the time shift ``FlowMatchEulerDiscreteScheduler.set_timesteps(mu=...)`` applies at
    ``seq_len`` image tokens (:func:`dynamic_mu`): ``exp(mu)`` for the exponential ``time_shift_type`` (the
    default), ``mu`` for the linear one; :func:`shifted_sigmas` applies it."""
    mu = dynamic_mu(seq_len, scheduler_config)
    return mu if scheduler_config.get("time_shift_type", "exponential") == "linear" else math.exp(mu)


def scheduler_shift(seq_len: int, scheduler_config: dict[str, Any], fixed: float | None = None) -> float:
    """The shift the checkpoint's scheduler applies to an image of ``seq_len`` tokens, as a pipeline that passes
    ``mu`` samples it: :func:`dynamic_shift` with ``use_dynamic_shifting`` (True when the config leaves it out, as
    the resolution-dependent configs of FLUX and Qwen-Image set it), else the config's fixed ``shift``; ``fixed``
    (a family's shift option, ``--flux_shift``) wins when given."""
    if fixed is not None:
        return float(fixed)
    if scheduler_config.get("use_dynamic_shifting", True):
        return dynamic_shift(seq_len, scheduler_config)
    return float(scheduler_config.get("shift", 1.0))


def shifted_sigmas(u: torch.Tensor, factor: float, form: Literal["s*u+1-u", "1+(s-1)*u"] = "s*u+1-u") -> torch.Tensor:
    """``s u / (s u + 1 - u)`` (``form`` ``"1+(s-1)*u"``: ``s u / (1 + (s - 1) u)``, the same value written as a
    family first wrote it: the two round differently in the last bit, and a family keeps its adapters' bits): the
    scheduler's time shift of a density draw ``u`` in [0, 1] by ``factor`` (:func:`scheduler_shift`; sigma 0 stays
    0 and 1 stays 1, no division by 0). Training draws ``u`` continuously and shifts it as the pipeline shifts its
    sigmas at inference for the same image size (musubi-tuner, ai-toolkit)."""
    if form == "1+(s-1)*u":
        return factor * u / (1.0 + (factor - 1.0) * u)
    scaled = factor * u
    return scaled / (scaled + (1.0 - u))


def training_scheduler(scheduler_config: dict[str, Any]):
    """A ``FlowMatchEulerDiscreteScheduler`` carrying the checkpoint's flow shift.

    ``scheduler_config`` is the checkpoint's ``scheduler/scheduler_config.json`` (empty: shift 1, 1000 steps).
    Flow-matching configs call the shift ``shift``; the DPM-Solver configs Sana ships call it ``flow_shift``,
    which wins when both are set.
    """
    from diffusers import FlowMatchEulerDiscreteScheduler

    shift = scheduler_config.get("flow_shift") or scheduler_config.get("shift") or 1.0
    return FlowMatchEulerDiscreteScheduler(
        num_train_timesteps=scheduler_config.get("num_train_timesteps", 1000), shift=float(shift)
    )


def flow_tables(scheduler, device: torch.device | str) -> tuple[torch.Tensor, torch.Tensor]:
    """The scheduler's ``(sigmas, timesteps)`` tables on ``device``.

    The step indexes them every micro-batch; build them once at load, so that no step copies them from the
    host (a blocking copy on CUDA). Index 0 is the noisiest entry (sigma 1, timestep ``num_train_timesteps``).
    """
    return scheduler.sigmas.to(device), scheduler.timesteps.to(device)


def sample_indices(
    weighting_scheme: str,
    batch_size: int,
    num_train_timesteps: int,
    *,
    logit_mean: float = 0.0,
    logit_std: float = 1.0,
    mode_scale: float = 1.29,
    device: torch.device | str = "cpu",
    generator: torch.Generator | None = None,
) -> torch.Tensor:
    """One table index per sample (int64, ``[batch_size]``), in ``[0, num_train_timesteps - 1]``.

    ``u`` comes from ``diffusers.training_utils.compute_density_for_timestep_sampling`` (``logit_normal``:
    sigmoid of N(logit_mean, logit_std); ``mode``: the SD3 paper's mode density with ``mode_scale``; anything
    else: uniform) and becomes ``floor(u * num_train_timesteps)``, as in diffusers' SD3/Sana scripts. The clamp
    keeps ``u`` = 1 (possible in float32 after the sigmoid) inside the table.
    """
    from diffusers.training_utils import compute_density_for_timestep_sampling

    u = compute_density_for_timestep_sampling(
        weighting_scheme,
        batch_size,
        logit_mean=logit_mean,
        logit_std=logit_std,
        mode_scale=mode_scale,
        device=device,
        generator=generator,
    )
    return (u * num_train_timesteps).long().clamp(max=num_train_timesteps - 1)


def density_draws(
    options,
    batch_size: int,
    device: torch.device | str,
    generator: torch.Generator | None,
    logit_mean: float | None = None,
):
    """``u`` in [0, 1] per sample (``[batch_size]``) from the run's timestep density: ``options``' (a
    :class:`~dit_lora.modeling.timestep_options.FlowMatchingOptions`) ``weighting_scheme``, ``logit_mean`` (or the
    ``logit_mean`` given: Ideogram 4 moves it with the image's size), ``logit_std`` and ``mode_scale`` through
    ``compute_density_for_timestep_sampling``, for a family that shifts ``u`` into its sigmas itself (continuous, not
    a table index: :func:`sample_indices`)."""
    from diffusers.training_utils import compute_density_for_timestep_sampling  # slow: only when a step runs

    return compute_density_for_timestep_sampling(
        options.weighting_scheme,
        batch_size,
        logit_mean=options.logit_mean if logit_mean is None else logit_mean,
        logit_std=options.logit_std,
        mode_scale=options.mode_scale,
        device=device,
        generator=generator,
    )


def option_draw(
    options, latents: torch.Tensor, tables: tuple[torch.Tensor, torch.Tensor], generator: torch.Generator | None
) -> FlowDraw:
    """:func:`draw` at the run's timestep density: ``options``' (a
    :class:`~dit_lora.modeling.timestep_options.FlowMatchingOptions`) ``weighting_scheme``, ``logit_mean``,
    ``logit_std`` and ``mode_scale``."""
    return draw(
        latents,
        tables,
        options.weighting_scheme,
        logit_mean=options.logit_mean,
        logit_std=options.logit_std,
        mode_scale=options.mode_scale,
        generator=generator,
    )


def sampling_draw(
    options,
    latents: torch.Tensor,
    tables: tuple[torch.Tensor, torch.Tensor],
    generator: torch.Generator | None,
    span: tuple[int, int] | None = None,
) -> FlowDraw:
    """:func:`draw` at the run's ``--timestep_sampling``: ``options``' (a
    :class:`~dit_lora.modeling.timestep_options.TimestepSamplingOptions`) ``timestep_sampling``, ``logit_mean`` and
    ``logit_std`` (Wan, Z-Image); ``span``: the part of the tables drawn from, as :func:`draw` takes it."""
    return draw(
        latents,
        tables,
        options.timestep_sampling,
        logit_mean=options.logit_mean,
        logit_std=options.logit_std,
        generator=generator,
        span=span,
    )


def _per_sample(values: torch.Tensor, like: torch.Tensor) -> torch.Tensor:
    """``values`` (``[B]``) shaped to broadcast over ``like`` (``[B, ...]``)."""
    if values.ndim != 1 or values.shape[0] != like.shape[0]:
        raise ValueError(f"expected one value per sample ([{like.shape[0]}]), got shape {tuple(values.shape)}")
    return values.view(-1, *([1] * (like.ndim - 1)))


def noise_and_sigmas(
    latents: torch.Tensor, options, generator: torch.Generator | None, shift: float
) -> tuple[torch.Tensor, torch.Tensor]:
    """The noise of a batch (drawn first) and each sample's sigma: a draw of the run's density
    (:func:`density_draws`) shifted by ``shift`` in the form ``s u / (1 + (s - 1) u)``, in the latents' dtype: the
    draws of a family that shifts continuously (FLUX.1, FLUX.2), in the order their adapters' bits depend on."""
    noise = torch.randn(latents.shape, generator=generator, device=latents.device, dtype=latents.dtype)
    u = density_draws(options, latents.shape[0], latents.device, generator)
    return noise, shifted_sigmas(u, shift, form="1+(s-1)*u").to(latents.dtype)


def noisy_latents(latents: torch.Tensor, noise: torch.Tensor, sigmas: torch.Tensor) -> torch.Tensor:
    """``x_t = (1 - sigma) x0 + sigma eps`` per sample, for any latent layout (``sigmas`` is ``[B]``).

    The rectified-flow interpolation of ``FlowMatchEulerDiscreteScheduler.scale_noise`` and diffusers'
    flow-matching training scripts.
    """
    sigma = _per_sample(sigmas, latents)
    return (1.0 - sigma) * latents + sigma * noise


def velocity_target(latents: torch.Tensor, noise: torch.Tensor) -> torch.Tensor:
    """The flow-matching target ``eps - x0`` (the velocity ``d x_t / d sigma``)."""
    return noise - latents


def loss_weighting(weighting_scheme: str, sigmas: torch.Tensor) -> torch.Tensor:
    """Per-sample loss weights (``[B]``) from ``diffusers.training_utils.compute_loss_weighting_for_sd3``.

    ``sigma_sqrt``: ``sigma^-2``; ``cosmap``: ``2 / (pi (1 - 2 sigma + 2 sigma^2))``; any other scheme
    (``logit_normal``, ``mode``, ``none``): 1, the density alone shapes the loss.
    """
    from diffusers.training_utils import compute_loss_weighting_for_sd3

    return compute_loss_weighting_for_sd3(weighting_scheme, sigmas=sigmas).view_as(sigmas)


def weighted_mse(pred: torch.Tensor, target: torch.Tensor, weighting: torch.Tensor) -> torch.Tensor:
    """``mean_b(w_b * mean((pred_b - target_b)^2))`` in fp32, a 0-d tensor.

    As diffusers' scripts: the squared error is averaged within each sample, weighted, then averaged over the
    batch (with equal-sized samples this is their ``mean(w * (pred - target)^2)``).
    """
    per_sample = ((pred.float() - target.float()) ** 2).flatten(1).mean(1)
    return (weighting.float() * per_sample).mean()


@dataclass(frozen=True)
class FlowDraw:
    """What one flow-matching step draws for a batch: the noise and each sample's table entry."""

    noise: torch.Tensor
    indices: torch.Tensor  #: int64 ``[B]``
    sigmas: torch.Tensor  #: ``[B]``, in the latents' dtype
    timesteps: torch.Tensor  #: ``[B]``, the table's dtype (float32): what the transformer is given


def draw(
    latents: torch.Tensor,
    tables: tuple[torch.Tensor, torch.Tensor],
    weighting_scheme: str,
    *,
    logit_mean: float = 0.0,
    logit_std: float = 1.0,
    mode_scale: float = 1.29,
    generator: torch.Generator | None = None,
    span: tuple[int, int] | None = None,
) -> FlowDraw:
    """Noise like ``latents``, then one table index per sample, both from ``generator`` (in that order).

    ``tables`` is :func:`flow_tables`' output on the latents' device; its length is the scheduler's
    ``num_train_timesteps``. ``span``: the part of the tables drawn from, ``(first, end)`` (a two-expert Wan run's
    trained expert's entries); None, all of them. The sigmas are cast to the latents' dtype (as diffusers' scripts
    do), the timesteps are not.
    """
    device = latents.device
    noise = torch.randn(latents.shape, generator=generator, device=device, dtype=latents.dtype)
    sigma_table, timestep_table = tables
    first, end = span if span is not None else (0, sigma_table.shape[0])
    indices = first + sample_indices(
        weighting_scheme,
        latents.shape[0],
        end - first,
        logit_mean=logit_mean,
        logit_std=logit_std,
        mode_scale=mode_scale,
        device=device,
        generator=generator,
    )
    return FlowDraw(
        noise=noise, indices=indices, sigmas=sigma_table[indices].to(latents.dtype), timesteps=timestep_table[indices]
    )
