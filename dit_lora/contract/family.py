"""What a run loads (:class:`Components`), handed to every component of a family's
:class:`~dit_lora.contract.spec.FamilySpec`, and :func:`schedule_on_device`, which every diffusion family calls at load.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # the contract names these in its signatures only: it sits below dit_lora.config, and the
    # registry and `dit-lora --help` read it without torch
    import torch


@dataclass
class Components:
    """The loaded model parts of a run. ``model`` is the module that gets LoRA: a diffusion
    transformer, or a video LLM (vision tower, projector and language model)."""

    model: torch.nn.Module
    scheduler: Any = None  # the training noise schedule (diffusion); None for language models
    encoders: dict[str, Any] = field(default_factory=dict)  # e.g. vae, text_encoder, tokenizer
    #: what the run decided, as the family's own typed object (e.g. Sana's ``SanaRun``); None until it decides
    state: Any = None


def schedule_on_device(scheduler, device: torch.device):
    """``scheduler`` with its ``alphas_cumprod`` table on ``device``, once at load.

    diffusers' ``add_noise``/``get_velocity`` move the table to the samples' device on first use;
    doing it here keeps that blocking host-to-device copy out of every training step.
    """
    scheduler.alphas_cumprod = scheduler.alphas_cumprod.to(device)
    return scheduler
