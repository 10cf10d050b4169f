"""The memory plan of a text-to-image flow family loaded by the kit: :class:`CaptionPlan`.

Its components from their configs on the meta device (:func:`~.text_conditioned.meta_components`: the transformer
in the run's dtype, counted by :attr:`~.components.DiffusionPlan.depth_key`, the VAE in fp32, the text encoder) with
the family's run state holding the run's caption length, and the cached caption embeddings (and their mask) at that
length (:func:`caption_embeddings`, which a video family's plan shares). A family states its classes, its state,
its mask's key and its caption length.
"""

from __future__ import annotations

from abc import abstractmethod
from typing import TYPE_CHECKING

import torch

from dit_lora.contract.capabilities import TextSettings
from dit_lora.contract.family import Components
from dit_lora.kit.components import DiffusionPlan
from dit_lora.kit.run_state import FlowRun
from dit_lora.kit.text_conditioned import meta_components

if TYPE_CHECKING:
    from dit_lora.config.schema import DataOptions, TrainConfig


class CaptionPlan(DiffusionPlan):
    """``FamilySpec.plan``: transformer, VAE and text encoder on the meta device; captions at the run's length."""

    #: the diffusers transformer and VAE class names
    transformer: str = ""
    vae: str = ""
    #: the family's run state (built with the run's text settings)
    state: type[FlowRun] = FlowRun
    #: the key of the caption mask the cache holds beside the embeddings (None: no mask, every caption is full)
    mask: str | None = None

    @abstractmethod
    def text_length(self, data: DataOptions) -> int:
        """The run's caption length (``--max_sequence_length``, else the pipeline's default; ``data``: the run's
        ``cfg.data``)."""

    def plan_components(self, cfg: TrainConfig, read, depth: int | None = None) -> Components:
        """What the kit's loader loads for the family, built from the configs ``read`` returns (``depth``: that
        many blocks)."""
        import diffusers  # heavy: only when a plan is made

        return meta_components(
            cfg,
            read,
            depth,
            transformer_class=getattr(diffusers, self.transformer),
            depth_key=self.depth_key[1],
            vae_class=getattr(diffusers, self.vae),
            state=self.state(text=TextSettings(max_sequence_length=self.text_length(cfg.data))),
        )

    def plan_conditioning(self, comps: Components, cfg: TrainConfig, batch_size: int) -> dict[str, torch.Tensor]:
        """:func:`caption_embeddings` of the family's mask."""
        return caption_embeddings(comps, cfg.weight_dtype, batch_size, self.mask)


def caption_embeddings(
    comps: Components, dtype: torch.dtype, batch_size: int, mask: str | None
) -> dict[str, torch.Tensor]:
    """Caption embeddings in ``dtype`` (the run's ``cfg.weight_dtype``) and their ``mask`` at the run's text length
    (its state's text settings), as empty tensors: the cached conditioning of a plan's batch."""
    length, width = comps.state.text.max_sequence_length, comps.encoders["text_encoder"].config.hidden_size
    embeds = {"prompt_embeds": torch.empty(batch_size, length, width, dtype=dtype)}
    if mask is not None:
        embeds[mask] = torch.ones(batch_size, length, dtype=torch.long)
    return embeds
