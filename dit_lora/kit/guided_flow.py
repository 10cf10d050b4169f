"""Rectified flow, with a guidance embedding where the transformer has one, shifted per batch as the pipeline samples
that size (FLUX.1, FLUX.2, Chroma, Krea 2, Ideogram 4):
:class:`GuidedFlowRun`, the run state (its :meth:`~GuidedFlowRun.components`: the components built with it),
:class:`GuidedFlowLoss`, the loss, and :class:`GuidedFlowPlan`, the memory plan of their two block lists. The loss and
the plan are mixins beside the kit's base, as ``class FluxLoss(GuidedFlowLoss, DiffusionLoss)`` (so a family's class
is one step from each and a variant of it, FLUX.1 Kontext's, two).

As diffusers' FLUX training scripts: ``x_t = (1 - sigma) x0 + sigma eps``, the transformer given ``timestep = sigma``
(it multiplies by 1000 itself) and, where it has the guidance embedding, one fixed guidance value (the family's
option), the target ``eps - x0``, the per-sample MSE weighted by ``compute_loss_weighting_for_sd3`` (or masked). The
density: ``u`` from the run's ``--weighting_scheme`` (:func:`~dit_lora.modeling.flow_matching.density_draws`), then
``sigma = s u / (1 + (s - 1) u)``, continuous, ``s`` the scheduler's shift at the batch's token count
(:func:`~dit_lora.modeling.flow_matching.scheduler_shift`: ``exp(mu)`` on the config's line from ``base_shift`` to
``max_shift``; musubi-tuner, ai-toolkit), or the family's fixed-shift option. A family states its options' names, its
state class, how many tokens a latent grid is and how its transformer is called (its packing and position ids).
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import torch

from dit_lora.contract.capabilities import TextSettings
from dit_lora.contract.family import Components
from dit_lora.kit.loader import BlockMix, LoadedParts, plan_parts
from dit_lora.kit.run_state import FamilyRun
from dit_lora.modeling.flow_matching import (
    loss_weighting,
    noise_and_sigmas,
    noisy_latents,
    scheduler_shift,
    training_scheduler,
    velocity_target,
)
from dit_lora.modeling.masked_loss import weighted_or_masked_mse

if TYPE_CHECKING:
    from dit_lora.config.schema import TrainConfig


@dataclass
class GuidedFlowRun(FamilyRun):
    """The per-run state of a guided flow family (mutable: setup fills it in as it decides): the caption length the
    pipeline pads to and what the checkpoint is. (Its sigmas are drawn per batch from the shifted density, never
    from the scheduler's tables: no ``flow_tables``, unlike :class:`~dit_lora.kit.run_state.FlowRun`.)"""

    #: the checkpoint's scheduler config (the dynamic shift's line and the validation sampler); {} until loaded
    scheduler_config: dict[str, Any] = field(default_factory=dict)
    #: how captions are encoded (``--max_sequence_length`` and the family's own settings); set by ``configure``
    text: TextSettings | None = None
    #: the transformer has a guidance embedding (guidance-distilled: FLUX.1 [dev], FLUX.2 [dev]; Chroma's config has
    #: no such key: none)
    guidance_embeds: bool = True

    def components(self, loaded: LoadedParts) -> Components:
        """The components of ``loaded`` (from the folder, or on the meta device for a plan) with this state, the
        checkpoint's scheduler config and guidance embedding recorded in it, the training scheduler built from
        the config."""
        self.scheduler_config = loaded.scheduler_config
        self.guidance_embeds = bool(getattr(loaded.transformer.config, "guidance_embeds", False))
        return loaded.components(training_scheduler(loaded.scheduler_config), self)


class GuidedFlowLoss(ABC):
    """``FamilySpec.loss``: the guided rectified-flow loss of one micro-batch, a mixin before the kit's
    :class:`~dit_lora.kit.components.DiffusionLoss` (which prepares the batches): ``class FluxLoss(GuidedFlowLoss,
    DiffusionLoss)``. A family states :attr:`state`, :attr:`shift_option`, :attr:`guidance_option`,
    :meth:`image_tokens` and :meth:`predict`."""

    #: the family's run state (``comps.state``)
    state: type[GuidedFlowRun] = GuidedFlowRun
    #: the family's options: its fixed shift (None: the scheduler's) and the guidance its embedding is fed
    shift_option: str = ""
    guidance_option: str = ""

    @abstractmethod
    def image_tokens(self, latents: torch.Tensor) -> int:
        """The transformer's image tokens of one latent grid ``(B, C, H, W)``: what the shift's line is read at."""

    @abstractmethod
    def predict(
        self, model: torch.nn.Module, noisy: torch.Tensor, sigmas: torch.Tensor, guidance, batch: dict[str, Any]
    ) -> torch.Tensor:
        """The transformer's velocity for the noisy latents ``(B, C, H, W)``, back on their grid."""

    def compute_loss(
        self,
        comps: Components,
        model: torch.nn.Module,
        batch: dict[str, Any],
        generator: torch.Generator,
        cfg: TrainConfig,
    ) -> torch.Tensor:
        """Noise, then each sample's timestep from the run's density shifted for the batch's size, the velocity
        predicted, the weighted MSE against ``eps - x0``."""
        latents, options, state = batch["latents"], cfg.family_options, self.state.of(comps)
        fixed = getattr(options, self.shift_option)
        shift = scheduler_shift(self.image_tokens(latents), state.scheduler_config, fixed)
        noise, sigmas = noise_and_sigmas(latents, options, generator, shift)
        guidance = None
        if state.guidance_embeds:  # guidance-distilled: fed one fixed value
            value = getattr(options, self.guidance_option)
            guidance = torch.full((latents.shape[0],), value, device=latents.device)
        pred = self.predict(model, noisy_latents(latents, noise, sigmas), sigmas, guidance, batch)
        weighting = loss_weighting(options.weighting_scheme, sigmas)
        # --masked_loss: per cell of the latent grid (the mask is cached at the latents' size)
        return weighted_or_masked_mse(pred, velocity_target(latents, noise), weighting, batch, cfg.data)


class GuidedFlowPlan:
    """``FamilySpec.plan`` of a guided flow family, a mixin before the kit's
    :class:`~dit_lora.kit.components.DiffusionPlan` (``class FluxPlan(GuidedFlowPlan, DiffusionPlan)``), whose
    transformer has two block lists planned a unit at a time (:attr:`units`, the kit's
    :class:`~dit_lora.kit.loader.BlockMix`): the kit model's components on the meta device with the run's text
    settings in their state, and the caption embeddings padded to the run's text length at the transformer's
    ``joint_attention_dim`` (a family adds the rest of its cached conditioning)."""

    #: the planned units: one block of the first list with its share of the second
    units: BlockMix = BlockMix()
    #: the family's model and encoders (:class:`~dit_lora.kit.components.DiffusionPlan`'s, wired by ``diffusion_spec``)
    model: Any
    encoders: Any

    @property
    def swap_depth_keys(self) -> tuple[tuple[str, str], ...]:
        """Each block list's length: ``--blocks_to_swap`` counts the longest."""
        return self.units.swap_depth_keys

    def plan_components(self, cfg: TrainConfig, read, depth: int | None = None) -> Components:
        """The model's components of its parts built on the meta device from the configs ``read`` returns
        (``depth``: that many planned units), the run's text settings recorded in their state."""
        loaded = plan_parts(self.model.pipeline_parts(cfg), cfg, read, depth, at_depth=self.units.at_depth)
        comps = self.model.build_components(cfg, loaded, None)  # None: the planned parts stay on the meta device
        encoders: Any = self.encoders  # a text-conditioned family's: it states its text settings
        comps.state.text = encoders.text_settings(cfg)
        return comps

    def plan_conditioning(self, comps: Components, cfg: TrainConfig, batch_size: int) -> dict[str, torch.Tensor]:
        """Caption embeddings at the run's text length and the transformer's ``joint_attention_dim``, as empty
        tensors (the text ids are built per step)."""
        model: Any = comps.model  # the transformer plan_components built
        length, width = comps.state.text.max_sequence_length, int(model.config.joint_attention_dim)
        return {"prompt_embeds": torch.empty(batch_size, length, width, dtype=cfg.weight_dtype)}
