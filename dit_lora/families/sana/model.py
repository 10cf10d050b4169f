"""Sana's model component and what is read from its small config files before anything loads: the config checks,
the resolution it takes, its defaults, its precision policy and notes, its aspect-ratio buckets, and ``--demo``."""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

import torch

from dit_lora.catalogue import entries, match
from dit_lora.catalogue.defaults import config_reader
from dit_lora.contract.family import Components
from dit_lora.core.errors import UserError
from dit_lora.families.sana import demo as tiny_sana  # looked up at call time: tests stand in the model build
from dit_lora.families.sana.catalogue import SPRINT_REFUSAL
from dit_lora.families.sana.state import SanaRun
from dit_lora.kit.builder import LatentGrid, check_divisible
from dit_lora.kit.components import DiffusionNotes, Fp32VaePrecision, ShapesDemo
from dit_lora.kit.loader import DiffusionModel, LoadedParts, published_parts
from dit_lora.modelfiles.pipeline_files import read_component_config, stored_dtype
from dit_lora.modeling.flow_matching import flow_tables, training_scheduler

if TYPE_CHECKING:
    from dit_lora.config.schema import TrainConfig

#: SanaPipeline.check_inputs: "`height` and `width` have to be divisible by 32"
PIPELINE_MULTIPLE = 32


def resolution_multiple(tr_cfg: dict, vae_cfg: dict) -> tuple[int, int]:
    """(what ``--resolution`` must be a multiple of, the latent stride): the latent stride (DC-AE compression x
    patch size) and SanaPipeline's 32, so that training and the validation/final samples accept the size."""
    latent = 2 ** (len(vae_cfg.get("encoder_block_out_channels", [0] * 6)) - 1) * int(tr_cfg.get("patch_size", 1))
    return math.lcm(latent, PIPELINE_MULTIPLE), latent


def check_resolution(resolution: int, tr_cfg: dict, vae_cfg: dict) -> None:
    """Refuse a ``--resolution`` the model or SanaPipeline cannot take, suggesting the nearest sizes both take."""
    multiple, latent = resolution_multiple(tr_cfg, vae_cfg)
    why = (
        f"this Sana model's latent stride is {latent} (DC-AE compression x patch size) and SanaPipeline, which draws "
        f"the validation and final samples, takes only sizes divisible by {PIPELINE_MULTIPLE} (see --resolution)"
    )
    check_divisible(resolution, multiple, why)


class SanaModel(DiffusionModel):
    """``FamilySpec.model``: the folder's checks, then (the kit's loader, :data:`PARTS`) the transformer and Gemma-2
    in the run's weight dtype, the DC-AE in fp32, and the tokenizer."""

    def validate_config(self, cfg: TrainConfig) -> None:
        """A diffusers Sana folder of safetensors whose tokenizer can load, at a resolution the model takes; not a
        SANA-Sprint transformer (its guidance embedding: :data:`~dit_lora.families.sana.catalogue.SPRINT_REFUSAL`)."""
        transformer_cfg = read_component_config(cfg.model, "transformer") or {}
        if transformer_cfg.get("guidance_embeds"):  # a Sprint transformer whatever the folder says it is
            raise UserError(SPRINT_REFUSAL.format(model=cfg.model.pretrained_model_name_or_path))
        self.check_folder(cfg)
        vae_cfg = read_component_config(cfg.model, "vae")
        if vae_cfg is not None:
            check_resolution(cfg.data.resolution, transformer_cfg, vae_cfg)

    def build_components(self, cfg: TrainConfig, loaded: LoadedParts, device: torch.device) -> Components:
        """The checkpoint's scheduler config and the training tables in the run's :class:`SanaRun`."""
        scheduler = training_scheduler(loaded.scheduler_config)
        return loaded.components(
            scheduler, SanaRun(scheduler_config=loaded.scheduler_config, flow_tables=flow_tables(scheduler, device))
        )


class SanaNotes(DiffusionNotes):
    """``FamilySpec.notes``: fp16-trained Sana checkpoints must not run in bf16."""

    def precision_notes(self, cfg: TrainConfig) -> list[str]:
        """Warnings about the checkpoint's stored precision (fp16-trained Sana must not run in bf16)."""
        dtype = stored_dtype(cfg.model)
        name = cfg.model.path
        fp16 = dtype == "F16" or (dtype is None and "Sana" in name and "BF16" not in name.upper())
        if not fp16 or cfg.training.mixed_precision != "bf16":  # fp16 keeps the trained precision; fp32 loses nothing
            return []
        entry = match("sana", config_reader(cfg.model), dtype)
        twin = next(
            (
                e
                for e in entries("sana")
                if entry is not None
                and e.stored_dtype == "bf16"
                and e.signature == entry.signature
                and e.depth == entry.depth
            ),
            None,
        )
        if twin is not None:
            advice = f"Prefer its BF16 release, {twin.hub_id}"
        elif entry is None:
            advice = (
                "Prefer a `_BF16_diffusers` release of the same model (e.g. "
                "Efficient-Large-Model/Sana_1600M_1024px_BF16_diffusers; `dit-lora models` lists them)"
            )
        else:
            advice = (
                f"{entry.hub_id} has no BF16 release (the Sana 600M and 512 px releases are fp16/fp32 only): "
                "--mixed_precision fp16 trains it in the precision it was trained in, at fp16's overflow risk "
                "(the finite-step guard skips such steps), or accept bf16's small precision cost"
            )
        return [
            (
                f"`{name}` stores fp16 weights: the Sana 1.0 fp16 checkpoints were trained in fp16 and the "
                f"maintainers warn bf16 degrades them. {advice}."
            )
        ]


#: Sana's pipeline folder, as the kit's loader reads it
PARTS = published_parts(
    "Efficient-Large-Model/Sana_600M_1024px_diffusers",
    kind="Sana",
    text_encoder_class="AutoModel",
    precision=Fp32VaePrecision(),  # the transformer and Gemma-2 in the run's weight dtype, the DC-AE in fp32
)


class SanaBuckets(LatentGrid):
    """``FamilySpec.image_buckets``: any aspect ratio (SanaTransformer2DModel patchifies and unpatchifies any height
    and width: its patch embedding has no positional table, or recomputes its sin-cos one for the grid), in the
    latent stride, DC-AE compression x patch size (32 x 1), from the model's configs (their defaults when no model is
    named, as in ``check-data``); and (``FamilySpec.defaults``) the resolution an uncatalogued model was built for:
    its transformer's ``sample_size`` x the DC-AE's compression."""

    def __init__(self) -> None:
        super().__init__(default_stride=32, vae_key="encoder_block_out_channels", vae_blocks=6, patch=1)


#: ``FamilySpec.defaults``: the same grid's :meth:`~LatentGrid.generic_defaults`
SanaDefaults = SanaBuckets


def check_demo_size(cfg: TrainConfig) -> None:
    """``FamilySpec.demo``'s check (:class:`~dit_lora.kit.components.ShapesDemo`): ``--resolution``
    against the demo model's config (``--demo_size``), nothing built yet."""
    tiny = tiny_sana.get_tiny_sana_config(cfg.model.demo_size)
    check_resolution(cfg.data.resolution, tiny["transformer"], tiny["vae"])


def build_demo(cfg: TrainConfig) -> None:
    """``FamilySpec.demo``'s model: the tiny random Sana pipeline of ``--demo_size`` (``demo.py``)."""
    tiny_sana.build_tiny_sana_pipeline(cfg.model.path, size=cfg.model.demo_size, seed=0)


#: ``FamilySpec.demo``: the tiny Sana of ``--demo_size`` and the shapes, its sizes checked first
DEMO = ShapesDemo(build_demo, check=check_demo_size)
