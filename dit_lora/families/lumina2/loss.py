"""Lumina 2's loss: the kit's rectified flow over cached latents and masked captions
(:class:`~dit_lora.kit.caption_flow.MaskedCaptionFlowLoss`) in Lumina 2's time and sign conventions.

``x_t = (1 - sigma) x0 + sigma eps`` with sigma from the checkpoint's shifted table (shift 6.0, no dynamic shifting)
at the run's ``--weighting_scheme`` density (the shared default ``logit_normal``; diffusers' example uses ``none``,
uniform). Lumina2Transformer2DModel counts
time the other way: ``Lumina2Pipeline`` gives it ``1 - t / 1000 = 1 - sigma`` (1 is clean) and negates its output
before the Euler step, so it predicts ``x0 - eps``, the target here. diffusers' ``train_dreambooth_lora_lumina2.py``
computes the same target but feeds the drawn sigma in as the *clean* fraction (``(1 - s) eps + s x0`` at time ``s``),
so the shifted table, which favours noisy times, trains mostly near-clean ones there; dit-lora trains at the noise
levels the pipeline samples (its Euler steps walk the same shifted table).
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import torch

from dit_lora.contract.family import Components
from dit_lora.families.lumina2.state import run_state, tables
from dit_lora.kit.caption_flow import (
    HostCaptionLengths,
    MaskedCaptionFlowLoss,
    reversed_target,
    reversed_time,
)


def caption_counts(batch: dict[str, Any]) -> list[int]:
    """The host-side caption token counts of a prepared batch (a planned batch has none: every caption is full)."""
    counts = batch.get("caption_lengths")
    if counts is None:
        mask = batch["prompt_attention_mask"]
        return [int(mask.shape[1])] * int(mask.shape[0])
    return list(counts)


class Lumina2Loss(HostCaptionLengths, MaskedCaptionFlowLoss):
    """``FamilySpec.loss``: the MSE of the transformer's ``x0 - eps`` at a drawn sigma, with the caption mask; the
    caption counts read on the host and given to the transformer's RoPE embedder (no device read per step)."""

    run_state, tables = staticmethod(run_state), staticmethod(tables)

    @contextmanager
    def around_predict(self, comps: Components, batch: dict[str, Any]) -> Iterator[None]:
        """The batch's caption counts in the run state while the transformer runs (its RoPE embedder's)."""
        state = run_state(comps)
        state.caption_counts = caption_counts(batch)
        try:
            yield
        finally:
            state.caption_counts = None

    def predict(
        self, model: torch.nn.Module, noisy: torch.Tensor, timesteps: torch.Tensor, embeds: torch.Tensor, mask
    ) -> torch.Tensor:
        """Lumina2Transformer2DModel's output at ``1 - sigma``, the captions' mask as the pipeline gives it."""
        return model(
            hidden_states=noisy,
            timestep=reversed_time(timesteps),
            encoder_hidden_states=embeds,
            encoder_attention_mask=mask,
            return_dict=False,
        )[0]

    def target(self, latents: torch.Tensor, noise: torch.Tensor) -> torch.Tensor:
        """``x0 - eps``."""
        return reversed_target(latents, noise)
