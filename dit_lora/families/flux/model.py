"""FLUX.1's model component and what is read from its small config files before anything loads: the config checks
(a step-distilled [schnell] refused), its precision policy, its buckets and ``--demo``."""

from __future__ import annotations

from typing import TYPE_CHECKING

import torch

from dit_lora.contract.family import Components
from dit_lora.core.errors import UserError
from dit_lora.families.flux import demo as tiny_flux  # looked up at call time: tests stand in the model build
from dit_lora.families.flux.state import FluxRun
from dit_lora.kit import packed
from dit_lora.kit.components import Fp32VaePrecision, ShapesDemo
from dit_lora.kit.loader import DiffusionModel, LoadedParts, published_parts
from dit_lora.modelfiles.pipeline_files import read_component_config

if TYPE_CHECKING:
    from dit_lora.config.schema import TrainConfig


def check_resolution(resolution: int) -> None:
    """The kit's refusal of a ``--resolution`` FluxPipeline cannot take (sizes divisible by 16)."""
    packed.check_resolution(resolution, "FLUX.1", "FluxPipeline")


def refuse_distilled(cfg: TrainConfig, transformer: dict | None, scheduler: dict | None) -> None:
    """FLUX.1 [schnell] (no guidance embedding, a static shift of 1: timestep-distilled for 1 to 4 steps) is refused
    in one paragraph, with what to train instead."""
    if transformer is None or transformer.get("guidance_embeds", True):
        return
    static = scheduler is not None and not scheduler.get("use_dynamic_shifting", False)
    raise UserError(
        f"`{cfg.model.pretrained_model_name_or_path}` is FLUX.1 [schnell] or another step-distilled FLUX.1 (its "
        "transformer has no guidance embedding"
        + (" and its scheduler a static shift with no dynamic shifting" if static else "")
        + "): it is distilled to sample in 1 to 4 steps, and a LoRA trained on it directly erodes that distillation "
        "(the other trainers need a de-distillation adapter merged first: ai-toolkit's assistant_lora_path "
        "ostris/FLUX.1-schnell-training-adapter). Train on black-forest-labs/FLUX.1-dev (guidance-distilled; "
        "non-commercial license), or, for a permissive license, a de-distilled schnell derivative such as "
        "ostris/OpenFLUX.1 loaded as a FluxPipeline folder."
    )


class FluxModel(DiffusionModel):
    """``FamilySpec.model``: the folder's checks, then (the kit's loader, :data:`PARTS`) the transformer, CLIP and T5 in
    the run's weight dtype, the VAE in fp32, the checkpoint recorded in a new :class:`FluxRun`."""

    def build_components(self, cfg: TrainConfig, loaded: LoadedParts, device: torch.device | None) -> Components:
        """The loaded parts (from the folder, or on the meta device for a plan) with a new :class:`FluxRun`, the
        checkpoint's scheduler config and guidance embedding recorded in it
        (:meth:`~dit_lora.kit.guided_flow.GuidedFlowRun.components`)."""
        return FluxRun().components(loaded)

    def validate_config(self, cfg: TrainConfig) -> None:
        """A diffusers FluxPipeline folder of safetensors whose tokenizers load, not step-distilled, at a size the
        pipeline takes."""
        self.check_folder(cfg)
        refuse_distilled(
            cfg,
            read_component_config(cfg.model, "transformer"),
            read_component_config(cfg.model, "scheduler", "scheduler_config.json"),
        )
        check_resolution(cfg.data.resolution)


#: FLUX.1's pipeline folder, as the kit's loader reads it: CLIP-L (its pooled output) and T5-XXL (its hidden states),
#: each with its tokenizer; the VAE in fp32 (the latents are cached once from it)
PARTS = published_parts("black-forest-labs/FLUX.1-dev", kind="FLUX.1", precision=Fp32VaePrecision())


#: ``FamilySpec.demo``: the tiny FLUX.1 [dev] (``demo.py``) and the shapes, ``--resolution`` checked first
DEMO = ShapesDemo.tiny(tiny_flux, "build_tiny_flux_pipeline", check_resolution, variant="dev")
#: Kontext's: the tiny FluxKontextPipeline, each shape with its control image (the shape in grey)
KONTEXT_DEMO = ShapesDemo.tiny(tiny_flux, "build_tiny_flux_pipeline", check_resolution, variant="kontext", controls=1)
