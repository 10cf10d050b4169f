"""CogVideoX's loss component (:class:`CogVideoXLoss`) and its math (pure functions).

What the reference trainers (diffusers' CogVideoX examples, finetrainers, THUDM's
``finetune/``) do, per sample:

1. ``t ~ U{0..999}`` (discrete), ``noise ~ N(0, I)``;
2. ``x_t = scheduler.add_noise(x0, noise, t) = sqrt(a_t) x0 + sqrt(1 - a_t) noise`` with
   ``a_t = scheduler.alphas_cumprod[t]`` (CogVideoXDDIMScheduler: SNR-shifted by
   ``snr_shift_scale`` then rescaled to zero terminal SNR, so ``a_999 = 0``);
3. the transformer predicts ``v = sqrt(a_t) noise - sqrt(1 - a_t) x0``;
4. ``x0_hat = scheduler.get_velocity(v, x_t, t)``: ``get_velocity(sample, noise, t)`` returns
   ``sqrt(a_t) * noise - sqrt(1 - a_t) * sample``, so with ``sample=v, noise=x_t`` it is
   ``sqrt(a_t) x_t - sqrt(1 - a_t) v = a_t x0 + (1 - a_t) x0 = x0``;
5. loss = ``mean_b( w_t * mean((x0_hat - x0)^2) )`` with ``w_t = 1 / (1 - a_t)``.

``w_t`` (:data:`WEIGHT_REFERENCE`, checked in the tests) is 1/(1 - a_0) = 1/beta_0 ~= 1176.5
at t=0 for ``snr_shift_scale`` 1.0 (CogVideoX-5b, 1.5) and ~= 392.8 for 3.0 (CogVideoX-2b:
the shift divides a_t by s - (s - 1) a_t); at t=100 it is ~8.8 (s=1) / ~3.7 (s=3), at t=500
~1.32 / ~1.10, and exactly 1.0 at t=999 (zero terminal SNR): low-t samples dominate the
gradient by up to ~1000x, hence the optional ``weight_cap``.

Since ``x0_hat - x0 = -sqrt(1 - a_t) (v_hat - v)``, the weighted x0 loss equals the plain
MSE on v: ``w_t * ||x0_hat - x0||^2 = ||v_hat - v||^2``.  Doing it the reference way keeps
the numerics (and the logged values) identical to theirs.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import torch

from dit_lora.contract.family import Components
from dit_lora.contract.spec import FamilyInfo
from dit_lora.families.cogvideox.encoders import CogVideoXEncoders, pipeline_class
from dit_lora.families.cogvideox.info import (
    OFS_VALUE,
    pad_latent_frames,
    transformer_config,
)
from dit_lora.families.cogvideox.state import run_state
from dit_lora.kit.components import DiffusionLoss

if TYPE_CHECKING:
    from dit_lora.config.schema import TrainConfig

__all__ = [
    "CogVideoXLoss",
    "WEIGHT_REFERENCE",
    "add_noise",
    "cogvideox_loss_weights",
    "cogvideox_v_loss",
    "sample_timesteps",
]

# 1 / (1 - alphas_cumprod[t]) of CogVideoXDDIMScheduler with the published configs
# (scaled_linear 0.00085..0.012, rescale_betas_zero_snr=True), rounded.  Checked in
# tests/families/cogvideox/test_loss.py.  snr_shift_scale 3.0: CogVideoX-2b; 1.0: 5B and 1.5.
WEIGHT_REFERENCE: dict[float, dict[int, float]] = {
    1.0: {0: 1176.47, 100: 8.831, 500: 1.318, 999: 1.0},
    3.0: {0: 392.82, 100: 3.680, 500: 1.105, 999: 1.0},
}


def _alphas_cumprod(scheduler: Any, device: torch.device) -> torch.Tensor:
    ac = scheduler.alphas_cumprod
    if not torch.is_tensor(ac):
        ac = torch.as_tensor(ac)
    return ac.to(device=device, dtype=torch.float32)


def cogvideox_loss_weights(scheduler: Any, timesteps: torch.Tensor, *, weight_cap: float | None = None) -> torch.Tensor:
    """``1 / (1 - alphas_cumprod[t])`` per sample (fp32), optionally clamped to ``weight_cap``."""
    if weight_cap is not None and not weight_cap > 0:
        raise ValueError(f"weight_cap must be positive, got {weight_cap!r}")
    ac = _alphas_cumprod(scheduler, timesteps.device)
    w = 1.0 / (1.0 - ac[timesteps.long()])
    if weight_cap is not None:
        w = w.clamp(max=float(weight_cap))
    return w


def add_noise(scheduler: Any, latents: torch.Tensor, noise: torch.Tensor, timesteps: torch.Tensor) -> torch.Tensor:
    """``scheduler.add_noise(latents, noise, timesteps)``: ``sqrt(a_t) x0 + sqrt(1 - a_t) noise``.

    Works for any latent layout (``[B, F, C, H, W]`` for CogVideoX); ``timesteps`` is ``[B]``.
    """
    if timesteps.ndim != 1 or timesteps.shape[0] != latents.shape[0]:
        raise ValueError(f"timesteps must have shape [{latents.shape[0]}], got {tuple(timesteps.shape)}")
    return scheduler.add_noise(latents, noise, timesteps.long())


def sample_timesteps(
    bsz: int,
    num_train_timesteps: int = 1000,
    *,
    sampling: str = "uniform",
    generator: torch.Generator | None = None,
    device: torch.device | str | None = None,
    logit_mean: float = 0.0,
    logit_std: float = 1.0,
) -> torch.Tensor:
    """Draw ``bsz`` discrete timesteps in ``[0, num_train_timesteps)`` (int64, on ``device``).

    ``"uniform"``: ``torch.randint`` (what all three reference trainers do).  ``"logit_normal"``:
    ``u = sigmoid(N(logit_mean, logit_std))`` mapped to ``floor(u * T)`` (SD3-style density,
    an option the reference CogVideoX trainers do not use).  Drawn where ``generator`` lives (the
    training step's generator is on the accelerator, so nothing is copied from the host and the
    step never waits on the device), then moved to ``device`` (a no-op in training).
    """
    if bsz < 1 or num_train_timesteps < 1:
        raise ValueError("bsz and num_train_timesteps must be >= 1")
    where = generator.device if generator is not None else (device or "cpu")
    if sampling == "uniform":
        t = torch.randint(0, num_train_timesteps, (bsz,), generator=generator, dtype=torch.int64, device=where)
    elif sampling == "logit_normal":
        u = torch.sigmoid(torch.randn(bsz, generator=generator, device=where) * logit_std + logit_mean)
        t = (u * num_train_timesteps).long().clamp_(0, num_train_timesteps - 1)
    else:
        raise ValueError(f"unknown timestep sampling {sampling!r}; use 'uniform' or 'logit_normal'")
    return t.to(device) if device is not None else t


def cogvideox_v_loss(
    transformer_out_v: torch.Tensor,
    noisy_latents: torch.Tensor,
    latents: torch.Tensor,
    timesteps: torch.Tensor,
    scheduler: Any,
    *,
    weight_cap: float | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """The reference CogVideoX loss; returns ``(loss, per_sample)``.

    ``transformer_out_v``: the model's v prediction, same shape as ``noisy_latents`` (x_t) and
    ``latents`` (clean x0), ``[B, ...]``; ``timesteps``: ``[B]`` ints.  Computed in fp32.
    ``per_sample[b] = w_b * mean((x0_hat_b - x0_b)^2)`` with ``w_b = 1 / (1 - a_{t_b})``
    (capped at ``weight_cap`` if given) and ``loss = per_sample.mean()``.
    """
    if transformer_out_v.shape != noisy_latents.shape or latents.shape != noisy_latents.shape:
        raise ValueError(
            f"shape mismatch: v {tuple(transformer_out_v.shape)}, x_t {tuple(noisy_latents.shape)}, "
            f"x0 {tuple(latents.shape)}"
        )
    if timesteps.ndim != 1 or timesteps.shape[0] != latents.shape[0]:
        raise ValueError(f"timesteps must have shape [{latents.shape[0]}], got {tuple(timesteps.shape)}")
    timesteps = timesteps.long()
    x0_hat = scheduler.get_velocity(transformer_out_v.float(), noisy_latents.float(), timesteps)
    mse = (x0_hat - latents.float()).pow(2).reshape(latents.shape[0], -1).mean(dim=1)
    per_sample = cogvideox_loss_weights(scheduler, timesteps, weight_cap=weight_cap) * mse
    return per_sample.mean(), per_sample


class CogVideoXLoss(DiffusionLoss):
    """``FamilySpec.loss``: :func:`cogvideox_v_loss` of the transformer's v prediction at drawn timesteps, with the
    pipeline's own RoPE and (1.5) its first-frame padding; text-to-video (``i2v.py`` adds the image latents)."""

    def __init__(self, encoders: CogVideoXEncoders, info: FamilyInfo) -> None:
        super().__init__(encoders)
        self.info = info

    def rotary_embeddings(self, comps: Components, height: int, width: int, frames: int, device: torch.device):
        """The pipeline's ``_prepare_rotary_positional_embeddings`` for ``frames`` latent frames of ``height`` x
        ``width`` latent pixels (cached in the run's state); ``None`` for transformers without RoPE (2B)."""
        if not transformer_config(comps.model).use_rotary_positional_embeddings:
            return None
        state = run_state(comps)
        key = (height, width, frames, str(device))
        if key not in state.rotary_cache:
            pipe = pipeline_class(self.info)(
                tokenizer=None, text_encoder=None, vae=None, transformer=comps.model, scheduler=None
            )
            scale = state.vae_scale_factor_spatial or 8
            pipe.vae_scale_factor_spatial = scale  # the constructor assumes 8 without a VAE
            state.rotary_cache[key] = pipe._prepare_rotary_positional_embeddings(
                height * scale, width * scale, frames, device
            )
        return state.rotary_cache[key]

    def model_input(
        self, noisy: torch.Tensor, batch: dict[str, Any], generator: torch.Generator, cfg: TrainConfig
    ) -> torch.Tensor:
        """What the transformer gets besides the noisy latents (text-to-video: nothing)."""
        return noisy

    def compute_loss(
        self,
        comps: Components,
        model: torch.nn.Module,
        batch: dict[str, Any],
        generator: torch.Generator,
        cfg: TrainConfig,
    ) -> torch.Tensor:
        """Timesteps, then noise, drawn from the step's generator; the weighted x0 loss of the v prediction."""
        scheduler, arch = comps.scheduler, transformer_config(comps.model)
        latents = pad_latent_frames(batch["latents"], arch.patch_size_t)
        device = latents.device
        bsz, frames, _, height, width = latents.shape
        options = cfg.family_options
        timesteps = sample_timesteps(  # drawn on the device with the step's generator: no host copy, no sync
            bsz,
            scheduler.config.num_train_timesteps,
            sampling=options.timestep_sampling,
            generator=generator,
            device=device,
            logit_mean=options.logit_mean,
            logit_std=options.logit_std,
        )
        noise = torch.randn(latents.shape, generator=generator, device=device, dtype=latents.dtype)
        noisy = scheduler.add_noise(latents, noise, timesteps)
        pred = model(
            hidden_states=self.model_input(noisy, batch, generator, cfg),
            encoder_hidden_states=batch["prompt_embeds"],
            timestep=timesteps,
            ofs=noisy.new_full((1,), OFS_VALUE) if arch.ofs_embed_dim else None,  # as the I2V pipeline: shape (1,)
            image_rotary_emb=self.rotary_embeddings(comps, height, width, frames, device),
            return_dict=False,
        )[0]
        return cogvideox_v_loss(pred, noisy, latents, timesteps, scheduler, weight_cap=options.loss_weight_cap)[0]
