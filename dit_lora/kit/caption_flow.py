"""The diffusers family kit's rectified-flow loss for a transformer that takes latents as they are cached
(``(B, C, H, W)``: it patches them itself) with masked caption embeddings: Sana and Lumina 2.

``x_t = (1 - sigma) x0 + sigma eps`` at a timestep drawn from the checkpoint's shifted table with the run's
``--weighting_scheme`` density (``diffusers.training_utils``), every batch cut to the caption tokens any cached
caption uses (``--trim_text_padding``: :class:`~dit_lora.kit.text_padding.TrimmedTextData` measured
them), the MSE against the family's target weighted as the scheme says, in fp32. A family states how its
transformer is called and what it predicts: the velocity ``eps - x0`` at time ``t`` (Sana), or, for the models that
count time the other way (1 is clean; Lumina 2, Z-Image), ``x0 - eps`` at :func:`reversed_time`.
"""

from __future__ import annotations

from abc import abstractmethod
from collections.abc import Callable
from contextlib import AbstractContextManager, nullcontext
from typing import TYPE_CHECKING, Any

import torch

from dit_lora.contract.family import Components
from dit_lora.data.text_padding import cut_text_padding
from dit_lora.kit.components import DiffusionLoss
from dit_lora.modeling.flow_matching import loss_weighting, noisy_latents, option_draw, velocity_target
from dit_lora.modeling.masked_loss import weighted_or_masked_mse

if TYPE_CHECKING:
    from dit_lora.config.schema import TrainConfig

#: the scheduler's timesteps run from 1000 (pure noise) down
TIME_SCALE = 1000.0


def reversed_time(timesteps: torch.Tensor) -> torch.Tensor:
    """The scheduler's timesteps (1000 = pure noise) as a reversed-time transformer takes them (1 = clean):
    ``(1000 - t) / 1000 = 1 - sigma`` (Lumina2Pipeline and ZImagePipeline compute the same)."""
    return (TIME_SCALE - timesteps) / TIME_SCALE


def reversed_target(latents: torch.Tensor, noise: torch.Tensor) -> torch.Tensor:
    """What a reversed-time transformer predicts: ``x0 - eps``, the negated flow velocity (its pipeline negates the
    output before the Euler step)."""
    return latents - noise


class HostCaptionLengths(DiffusionLoss):
    """``FamilySpec.loss``'s batches with each caption's token count as host ints (``caption_lengths``), from the
    ``prompt_lengths`` (:attr:`lengths_key`) the family's ``encode_prompts`` counted on the host: a transformer that
    needs them (Z-Image cuts its captions to them, Lumina 2's RoPE embedder reads them, Ideogram 4 lays its sequence
    out by them) never reads them back from the device."""

    #: the batch's host tensor of caption token counts (Ideogram 4's ragged cache: ``prompt_embeds_lengths``)
    lengths_key: str = "prompt_lengths"

    def prepare_batch(self, comps: Components, batch: dict[str, Any], device, cached: bool) -> dict[str, Any]:
        """The diffusion base's batch, plus ``caption_lengths`` (ints) from the host :attr:`lengths_key`."""
        # Cached: the loader's host tensor, read before it moves (on a CPU the move returns the same tensor, then the
        # device's). Encoded now: encode_prompts made it on the host.
        key = self.lengths_key
        lengths = [int(n) for n in batch[key].tolist()] if cached else None
        out = super().prepare_batch(comps, batch, device, cached)
        out["caption_lengths"] = lengths if lengths is not None else [int(n) for n in out[key].tolist()]
        return out


class MaskedCaptionFlowLoss(DiffusionLoss):
    """``FamilySpec.loss``: the rectified-flow loss of one micro-batch of cached ``(B, C, H, W)`` latents and masked
    captions (batches prepared by the diffusion base). A family gives its ``run_state`` (with ``text_tokens``) and
    ``tables`` functions and :meth:`predict`, and :meth:`target` when its model predicts ``x0 - eps``."""

    #: the family's ``run_state(comps)`` (its ``text_tokens``: the trimmed caption length) and flow tables
    run_state: Callable[[Components], Any]
    tables: Callable[[Components, torch.device], tuple[torch.Tensor, torch.Tensor]]

    @abstractmethod
    def predict(
        self, model: torch.nn.Module, noisy: torch.Tensor, timesteps: torch.Tensor, embeds: torch.Tensor, mask
    ) -> torch.Tensor:
        """The transformer's output for the noisy latents at the scheduler's ``timesteps`` and the captions."""

    def target(self, latents: torch.Tensor, noise: torch.Tensor) -> torch.Tensor:
        """The velocity ``eps - x0``."""
        return velocity_target(latents, noise)

    def around_predict(self, comps: Components, batch: dict[str, Any]) -> AbstractContextManager:
        """What holds while the transformer runs on ``batch`` (nothing here; Lumina 2: its caption counts)."""
        return nullcontext()

    def compute_loss(
        self,
        comps: Components,
        model: torch.nn.Module,
        batch: dict[str, Any],
        generator: torch.Generator,
        cfg: TrainConfig,
    ) -> torch.Tensor:
        """Noise drawn at timesteps of the run's density, the prediction, the weighted MSE against the target."""
        latents, options = batch["latents"], cfg.family_options
        drawn = option_draw(options, latents, self.tables(comps, latents.device), generator)
        noisy = noisy_latents(latents, drawn.noise, drawn.sigmas)
        embeds, mask = cut_text_padding(
            batch["prompt_embeds"], batch["prompt_attention_mask"], self.run_state(comps).text_tokens
        )
        with self.around_predict(comps, batch):
            pred = self.predict(model, noisy, drawn.timesteps, embeds, mask)
        weighting = loss_weighting(options.weighting_scheme, drawn.sigmas)
        # --masked_loss: per latent pixel (the transformer patches inside)
        return weighted_or_masked_mse(pred, self.target(latents, drawn.noise), weighting, batch, cfg.data)
