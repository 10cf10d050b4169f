"""What a diffusion run decides, kept in ``comps.state``: :class:`FamilyRun`, the base of every family's state
dataclass (:meth:`FamilyRun.of`: the state, an empty one put there first for components built by hand;
:meth:`FamilyRun.required`: a part loading sets, refused by its name where such components lack it),
:class:`FlowRun`, the state of a text-conditioned rectified-flow family (the checkpoint's scheduler config, the
training scheduler's flow tables, the run's text settings), and :class:`EpsilonRun`, the state of an
epsilon-prediction DDPM family (the checkpoint's scheduler config, a learned sigma's output layout)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar, Self, TypeVar

import torch

from dit_lora.contract.capabilities import TextSettings
from dit_lora.kit.text_conditioned import run_tables

T = TypeVar("T")


class FamilyRun:
    """A family's per-run state (a dataclass whose fields all have defaults: loading and setup fill them in)."""

    @classmethod
    def of(cls, comps) -> Self:
        """``comps.state``, an empty ``cls()`` put there first for components built by hand (tests, benchmarks)."""
        if comps.state is None:
            comps.state = cls()
        return comps.state

    #: the end of :meth:`required`'s refusal: what sets the family's parts (``"the X components' loading sets it"``)
    loaded_by: ClassVar[str] = "the components' loading sets it"

    @classmethod
    def required(cls, value: T | None, name: str) -> T:
        """``value``: a part of the run state that loading the components sets. Components built by hand without it
        are refused by its name and :attr:`loaded_by`, not with a TypeError on None."""
        if value is None:
            raise ValueError(f"comps.state.{name} is not set: {cls.loaded_by}")
        return value


@dataclass
class FlowRun(FamilyRun):
    """The per-run state a text-conditioned rectified-flow family keeps (mutable: the setup and data stages fill it
    in as they decide)."""

    #: the checkpoint's scheduler config (the validation sampler is built from it)
    scheduler_config: dict[str, Any] | None = None
    #: the training scheduler's ``(sigmas, timesteps)`` on the run's device (``flow_matching.flow_tables``)
    flow_tables: tuple[torch.Tensor, torch.Tensor] | None = None
    #: how captions are encoded (``--max_sequence_length`` and the family's own settings); set by ``configure``
    text: TextSettings | None = None

    @classmethod
    def tables(cls, comps, device: torch.device) -> tuple[torch.Tensor, torch.Tensor]:
        """The run's flow tables, built on ``device`` once when the components were built by hand (not per step)."""
        return run_tables(cls.of(comps), comps, device)


@dataclass
class EpsilonRun(FamilyRun):
    """The per-run state an epsilon-prediction DDPM family keeps (DiT, PixArt-alpha): the checkpoint's scheduler
    config and the transformer's output layout (:func:`output_layout`)."""

    #: the checkpoint's scheduler config (the validation sampler is built from it)
    scheduler_config: dict[str, Any] | None = None
    #: whether the transformer also predicts the variance (``out_channels == 2 * in_channels``; that half is unused)
    learned_sigma: bool = False
    #: the transformer's latent channels (the epsilon half of a learned-sigma output)
    in_channels: int = 4

    def epsilon(self, pred: torch.Tensor) -> torch.Tensor:
        """The predicted noise: as the pipelines split a learned-sigma output, its first ``in_channels`` (the rest,
        the variance, gets no gradient: the VLB term that trains it is not implemented); else the whole output."""
        return pred[:, : self.in_channels] if self.learned_sigma else pred


def output_layout(transformer: Any) -> dict[str, Any]:
    """:class:`EpsilonRun`'s ``learned_sigma`` and ``in_channels`` as the transformer's config states them."""
    channels = int(transformer.config.in_channels)
    return {"learned_sigma": transformer.config.out_channels == 2 * channels, "in_channels": channels}
