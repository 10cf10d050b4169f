"""FLUX.2's memory plan: its components from their configs on the meta device and the cached caption embeddings.

The transformer has two block lists (``transformer_blocks``, ``single_transformer_blocks``); the planner traces two
and three "blocks" and extrapolates to the depth its ``depth_key`` reads, so one planned unit is one double block
with its share of single blocks (dev: 8 double, 48 single, so 1 + 6; klein 4B: 5 + 20, 1 + 4; klein 9B: 8 + 24,
1 + 3) and the extrapolation adds whole units of the real model's mix.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any

import torch

from dit_lora.contract.capabilities import TextSettings
from dit_lora.contract.family import Components
from dit_lora.families.diffusion.components import DiffusionPlan
from dit_lora.families.flux2.encoders import max_sequence_length, out_layers
from dit_lora.families.flux2.model import index_pipeline, index_text_encoder
from dit_lora.families.flux2.state import Flux2Run
from dit_lora.modeling.flow_matching import training_scheduler
from dit_lora.plan.fake import diffusers_on_meta, transformers_on_meta

if TYPE_CHECKING:
    from dit_lora.config.schema import TrainConfig


def with_units(config: dict, units: int | None) -> dict:
    """The transformer config cut to ``units`` planned units (None: unchanged): ``units`` double blocks and
    ``units`` times the real model's single blocks per double block."""
    out = dict(config)
    if units is None:
        return out
    doubles, singles = int(config.get("num_layers", 8)), int(config.get("num_single_layers", 48))
    out["num_layers"] = units
    out["num_single_layers"] = units * math.ceil(singles / max(doubles, 1))
    return out


class Flux2Plan(DiffusionPlan):
    """``FamilySpec.plan``: transformer, VAE and text encoder on the meta device; the caption embeddings padded to
    the run's text length at the transformer's ``joint_attention_dim``."""

    #: each block list's length: --blocks_to_swap counts the longest (block_swap.per_list_counts)
    swap_depth_keys: tuple[tuple[str, str], ...] = (
        ("transformer/config.json", "num_layers"),
        ("transformer/config.json", "num_single_layers"),
    )

    def plan_components(self, cfg: TrainConfig, read, depth: int | None = None) -> Components:
        """What :meth:`Flux2Model.load_components <dit_lora.families.flux2.model.Flux2Model.load_components>`
        loads, built from the configs ``read`` returns (``depth``: that many planned units)."""
        import transformers
        from diffusers import AutoencoderKLFlux2, Flux2Transformer2DModel  # heavy: only when a plan is made

        dtype = cfg.weight_dtype
        index = read("", "model_index.json") or {}
        pipeline = index_pipeline(index)
        tr_cfg = read("transformer", "config.json")
        transformer = diffusers_on_meta(Flux2Transformer2DModel, with_units(tr_cfg, depth), dtype)
        vae = diffusers_on_meta(AutoencoderKLFlux2, read("vae", "config.json"), torch.float32)
        te_cfg = read("text_encoder", "config.json")
        text_encoder = transformers_on_meta(te_cfg, dtype, getattr(transformers, index_text_encoder(index)))
        depth_te = int((te_cfg.get("text_config") or te_cfg).get("num_hidden_layers", 40))
        scheduler_cfg = read("scheduler", "scheduler_config.json") or {}
        state = Flux2Run(
            pipeline_class=pipeline,
            scheduler_config=scheduler_cfg,
            guidance_embeds=bool(tr_cfg.get("guidance_embeds", True)),
            out_layers=out_layers(pipeline, depth_te),
            text=TextSettings(max_sequence_length=max_sequence_length(cfg)),
        )
        return Components(
            model=transformer,
            scheduler=training_scheduler(scheduler_cfg),
            encoders={"vae": vae, "text_encoder": text_encoder},
            state=state,
        )

    def plan_conditioning(self, comps: Components, cfg: TrainConfig, batch_size: int) -> dict[str, torch.Tensor]:
        """Caption embeddings at the run's text length and the transformer's ``joint_attention_dim``, as empty
        tensors (the text ids are built per step)."""
        length = comps.state.text.max_sequence_length
        model: Any = comps.model  # the Flux2Transformer2DModel plan_components built
        width = int(model.config.joint_attention_dim)
        return {"prompt_embeds": torch.empty(batch_size, length, width, dtype=cfg.weight_dtype)}
