"""The toy PixArt family's model: its pipeline folder as the kit's :class:`PipelineParts` (the kit loads it, and
plans it on the meta device), its run state, its checks and its memory plan."""

from __future__ import annotations

from dataclasses import dataclass

import torch

from dit_lora.contract.family import Components, schedule_on_device
from dit_lora.core.errors import UserError
from dit_lora.kit.builder import LatentGrid
from dit_lora.kit.components import DiffusionPlan, Fp32VaePrecision, ddpm_schedule
from dit_lora.kit.loader import DiffusionModel, LoadedParts, PipelineParts, TextEncoder
from dit_lora.kit.peft_capable import make_peft_capable
from dit_lora.kit.run_state import EpsilonRun, output_layout
from dit_lora.modelfiles.pipeline_files import read_component_config

from .options import DEFAULT_TEXT_LENGTH, text_length


@dataclass
class PixArtRun(EpsilonRun):
    """What a run decides, in ``comps.state``: the kit's epsilon-prediction state and the caption length."""

    text_length: int = DEFAULT_TEXT_LENGTH


run_state = PixArtRun.of  # comps.state, an empty PixArtRun put there first for components built by hand (tests)


GRID = LatentGrid()  # any aspect ratio in the latent stride; the resolution the model was built for
PARTS = PipelineParts(kind="PixArt", example_id="PixArt-alpha/PixArt-XL-2-512x512", vae="AutoencoderKL",
                      folder_listing="transformer/, vae/, text_encoder/", transformer="PixArtTransformer2DModel",
                      text_encoders=(TextEncoder("T5EncoderModel"),), precision=Fp32VaePrecision())


def pixart_components(cfg, loaded: LoadedParts, device: torch.device | None) -> Components:
    """The loaded (``device`` None: planned) parts as the run's components: the transformer given PEFT's methods, the
    DDPM schedule of the checkpoint's betas, the run's :class:`PixArtRun`."""
    transformer, scheduler = make_peft_capable(loaded.transformer), ddpm_schedule(loaded.scheduler_config)
    return Components(model=transformer, encoders=loaded.encoders(),
                      scheduler=schedule_on_device(scheduler, device) if device is not None else scheduler,
                      state=PixArtRun(scheduler_config=loaded.scheduler_config, text_length=text_length(cfg),
                                      **output_layout(transformer)))


class PixArtModel(DiffusionModel):
    """``FamilySpec.model``: the kit's checks and loader, an epsilon scheduler, a resolution it can patch."""

    def pipeline_parts(self, cfg) -> PipelineParts:
        return PARTS

    def build_components(self, cfg, loaded: LoadedParts, device: torch.device) -> Components:
        return pixart_components(cfg, loaded, device)

    def validate_config(self, cfg) -> None:
        self.check_folder(cfg)
        GRID.check_resolution(cfg.model, cfg.data.resolution)
        sched = read_component_config(cfg.model, "scheduler", "scheduler_config.json") or {}
        if sched.get("prediction_type", "epsilon") != "epsilon":
            raise UserError(f"The scheduler of `{cfg.model.pretrained_model_name_or_path}` predicts "
                            f"{sched.get('prediction_type')!r}; this family trains epsilon prediction only.")


class PixArtPlan(DiffusionPlan):
    """``FamilySpec.plan``: the kit's parts on the meta device (the kit plans through the model's
    ``build_components``); the caption embeddings at ``--pixart_text_length``."""

    def plan_conditioning(self, comps: Components, cfg, batch_size: int) -> dict[str, torch.Tensor]:
        length, width = comps.state.text_length, comps.encoders["text_encoder"].config.d_model
        return {"prompt_embeds": torch.empty(batch_size, length, width, dtype=cfg.weight_dtype),
                "prompt_attention_mask": torch.ones(batch_size, length, dtype=torch.long)}
