"""What the text-conditioned diffusion families (Sana, SANA-Video, Z-Image, FLUX.2, Qwen-Image) share: the cache
identity of a run's encoders, the setup that records the run's text settings, the run's flow tables kept in its
state, and the memory plan's transformer + VAE + text encoder on the meta device.

A family states only what differs: the key its model stamp is stored under (kept as each family first wrote it,
so existing caches keep their names), the settings its captions are encoded with, its own ``run_state`` and its
model classes.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import torch

from dit_lora.contract.family import Components
from dit_lora.families.diffusion.components import DiffusionSetup
from dit_lora.families.diffusion.latents import model_identity
from dit_lora.modeling.flow_matching import flow_tables, training_scheduler
from dit_lora.plan.fake import diffusers_on_meta, transformers_on_meta, with_depth

if TYPE_CHECKING:
    from dit_lora.config.schema import TrainConfig


def encoder_identity(
    cfg: TrainConfig, family: str, *, stamp_key: str = "model_index_mtime", **settings: Any
) -> dict[str, Any]:
    """A text-conditioned family's cache identity: ``family``, the model (absolute when local), its stamp under
    ``stamp_key``, revision, variant and text dtype, then the family's ``settings``, then a quantized text encoder
    (its embeddings differ from the full-precision one's)."""
    return {
        "family": family,
        **model_identity(cfg, stamp_key),
        "text_dtype": cfg.training.mixed_precision,
        **settings,
        **({"text_encoder_quantized": "nf4"} if cfg.model.quantize_text_encoder else {}),
    }


class TextSettingsSetup(DiffusionSetup):
    """``FamilySpec.setup``: the run's :class:`~dit_lora.contract.capabilities.TextSettings` recorded in its run
    state once the components load (what the family's ``encode_prompts`` encodes with). A family sets
    :attr:`run_state` to its own ``run_state`` function."""

    #: the family's ``run_state(comps)``: its typed ``comps.state`` (with a ``text`` field)
    run_state: Callable[[Components], Any]

    def __init__(self, encoders: Any) -> None:
        self.encoders = encoders

    def configure(self, comps: Components, cfg: TrainConfig) -> None:
        """Record the run's text settings in the family's run state."""
        type(self).run_state(comps).text = self.encoders.text_settings(cfg)


def run_tables(state, comps: Components, device: torch.device) -> tuple[torch.Tensor, torch.Tensor]:
    """The run's flow tables ``(sigmas, timesteps)`` kept in ``state.flow_tables``: built on ``device`` once when
    the components were built by hand (not per step)."""
    if state.flow_tables is None:
        state.flow_tables = flow_tables(comps.scheduler, device)
    return state.flow_tables


def meta_components(
    cfg: TrainConfig, read, depth: int | None, *, transformer_class, depth_key: str, vae_class, state
) -> Components:
    """A memory plan's components: the transformer (``depth``: that many blocks, counted by its config's
    ``depth_key``) in the run's dtype, the VAE (``vae_class``, fp32) and the text encoder on the meta device, built
    from the configs ``read`` returns, with the checkpoint's training scheduler and the family's run ``state``."""
    dtype = cfg.weight_dtype
    transformer = diffusers_on_meta(
        transformer_class, with_depth(read("transformer", "config.json"), depth_key, depth), dtype
    )
    vae = diffusers_on_meta(vae_class, read("vae", "config.json"), torch.float32)
    text_encoder = transformers_on_meta(read("text_encoder", "config.json"), dtype)
    scheduler = training_scheduler(read("scheduler", "scheduler_config.json") or {})
    return Components(
        model=transformer, scheduler=scheduler, encoders={"vae": vae, "text_encoder": text_encoder}, state=state
    )
