"""Chroma's model component and what is read from its small config files before anything loads: the config checks,
its precision policy (the modulation network kept out of ``--quantize_base``), its buckets and ``--demo``; and how it
checkpoints (:class:`ChromaTrainables`).

Activation checkpointing: diffusers' ``ChromaTransformer2DModel.forward`` calls its checkpointed single blocks without
the attention mask (the mask reaches them only when they run unchecked), so a run with checkpointing on would train
another model than one without. :class:`ChromaTrainables` checkpoints through a function that hands the single blocks
the mask the model was called with."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, cast

import torch
from torch.utils.checkpoint import checkpoint

from dit_lora.contract.family import Components
from dit_lora.core.errors import UserError
from dit_lora.families.chroma import demo as tiny_chroma  # looked up at call time: tests stand in the model build
from dit_lora.families.chroma.state import ChromaRun
from dit_lora.kit import packed
from dit_lora.kit.components import DiffusionTrainables, Fp32VaePrecision, ShapesDemo
from dit_lora.kit.loader import DiffusionModel, LoadedParts, published_parts

if TYPE_CHECKING:
    from dit_lora.config.schema import TrainConfig


def check_resolution(resolution: int) -> None:
    """The kit's refusal of a ``--resolution`` ChromaPipeline cannot take (sizes divisible by 16)."""
    packed.check_resolution(resolution, "Chroma", "ChromaPipeline")


def refuse_flash(cfg: TrainConfig) -> None:
    """Chroma1-Flash (Chroma1-Base distilled to sample in few steps without classifier-free guidance) is refused in
    one paragraph, with what to train instead; it has Chroma1-HD's configs, so only its Hub id tells it."""
    if "chroma1-flash" not in str(cfg.model.pretrained_model_name_or_path).lower():
        return
    raise UserError(
        f"`{cfg.model.pretrained_model_name_or_path}` is Chroma1-Flash, distilled from Chroma1-Base to sample in few "
        "steps without classifier-free guidance: a LoRA trained on it directly erodes that distillation, as one "
        "trained on FLUX.1 [schnell] does. Train on lodestones/Chroma1-HD (or lodestones/Chroma1-Base) with "
        "--pretrained_model_name_or_path; a Chroma LoRA trained there loads into the same ChromaPipeline."
    )


class ChromaPrecision(Fp32VaePrecision):
    """The transformer and T5 in the run's weight dtype, the VAE in fp32; ``distilled_guidance_layer`` (the network
    that computes every block's modulation from the timestep) stays out of ``--quantize_base``, as SD.Next keeps it out
    of its quantization: an error there shifts and scales every block at once."""

    def quantize_skip_modules(self) -> list[str]:
        """The modulation network and the in/out projections (the per-token embedders of image and caption)."""
        return ["distilled_guidance_layer", "x_embedder", "context_embedder", "proj_out"]


class ChromaModel(DiffusionModel):
    """``FamilySpec.model``: the folder's checks, then (the kit's loader, :data:`PARTS`) the transformer and T5 in the
    run's weight dtype, the VAE in fp32, the checkpoint recorded in a new :class:`ChromaRun`."""

    def build_components(self, cfg: TrainConfig, loaded: LoadedParts, device: torch.device | None) -> Components:
        """The loaded parts (from the folder, or on the meta device for a plan) with a new :class:`ChromaRun`, the
        checkpoint's scheduler config recorded in it (:meth:`~dit_lora.kit.guided_flow.GuidedFlowRun.components`)."""
        return ChromaRun().components(loaded)

    def validate_config(self, cfg: TrainConfig) -> None:
        """Not Chroma1-Flash; a diffusers ChromaPipeline folder of safetensors whose tokenizer loads, at a size the
        pipeline takes."""
        refuse_flash(cfg)
        self.check_folder(cfg)
        check_resolution(cfg.data.resolution)


#: Chroma's pipeline folder, as the kit's loader reads it: T5-XXL (its hidden states, computed with the caption mask)
#: with its tokenizer; the VAE in fp32 (the latents are cached once from it)
PARTS = published_parts("lodestones/Chroma1-HD", kind="Chroma", precision=ChromaPrecision())


#: ``FamilySpec.demo``: the tiny Chroma (``demo.py``) and the shapes, ``--resolution`` checked first
DEMO = ShapesDemo.tiny(tiny_chroma, "build_tiny_chroma_pipeline", check_resolution)


class ChromaTrainables(DiffusionTrainables):
    """``FamilySpec.trainables``: the kit's, checkpointing so that every block sees the attention mask."""

    def enable_gradient_checkpointing(self, model: torch.nn.Module) -> None:
        """Diffusers' switch with a checkpoint function that passes the single blocks the mask the model's forward
        was called with (a forward pre-hook holds it for the step)."""
        from diffusers.models.transformers.transformer_chroma import ChromaSingleTransformerBlock

        held: dict[str, torch.Tensor | None] = {"mask": None}

        def hold_mask(module, args, kwargs) -> None:
            held["mask"] = kwargs.get("attention_mask")

        def checkpointed(block, *args):
            # diffusers calls a checkpointed single block with (hidden_states, temb, rotary): the mask is next
            if isinstance(block, ChromaSingleTransformerBlock) and len(args) == 3:
                args = (*args, held["mask"])
            return checkpoint(block.__call__, *args, use_reentrant=False)

        model.register_forward_pre_hook(hold_mask, with_kwargs=True)
        cast(Any, model).enable_gradient_checkpointing(checkpointed)  # a diffusers ModelMixin's method
