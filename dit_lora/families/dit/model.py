"""DiT's model component and what is read from its small config files before anything loads: the config checks
(class-conditional, epsilon prediction, the native resolution, the class count), its default resolution, its
precision policy, its square images, the class tables it trains besides LoRA, and ``--demo``."""

from __future__ import annotations

from typing import TYPE_CHECKING, cast

import torch

from dit_lora.contract.family import Components, schedule_on_device
from dit_lora.core.errors import UserError
from dit_lora.data.sources import class_folder_names
from dit_lora.families.dit.classes import pretrained_rows
from dit_lora.families.dit.demo import build_tiny_dit_pipeline, get_tiny_dit_config
from dit_lora.families.dit.embedding import (
    CLASS_EMBEDDING_PATTERN,
    DEFAULT_CLASS_DROPOUT,
    PIPELINE_NULL_CLASS,
    label_embeddings,
)
from dit_lora.families.dit.state import DiTRun
from dit_lora.kit.builder import LatentGrid
from dit_lora.kit.components import DiffusionTrainables, Fp32VaePrecision, ShapesDemo, ddpm_schedule
from dit_lora.kit.loader import DiffusionModel, LoadedParts, PipelineParts, freeze
from dit_lora.kit.peft_capable import make_peft_capable
from dit_lora.kit.run_state import output_layout
from dit_lora.modelfiles.pipeline_files import read_component_config

if TYPE_CHECKING:
    from dit_lora.config.schema import FamilyOptions, LoraOptions, TrainConfig
    from dit_lora.families.dit.options import DiTOptions


class DiTModel(DiffusionModel):
    """``FamilySpec.model``: the folder's checks, then (the kit's loader, :data:`PARTS`) the transformer in the run's
    weight dtype and the AutoencoderKL in fp32; class-conditional, no text encoder."""

    def validate_config(self, cfg: TrainConfig) -> None:
        """A class-conditional, epsilon-prediction DiTPipeline folder of safetensors, at its native resolution, with
        a class count the model takes (or ``--num_classes`` within DiTPipeline's 1000)."""
        path = cfg.model.pretrained_model_name_or_path
        if cfg.data.caption_dropout_probability > 0:
            raise UserError(
                f"--caption_dropout_probability {cfg.data.caption_dropout_probability:g} is for captioned models; DiT is "
                "class-conditional and already drops class labels to its null class (the last row of its class "
                "table, the id DiTPipeline's guidance feeds) with the checkpoint's own probability (its "
                "LabelEmbedding dropout_prob: 0.1 for facebook/DiT-XL-2-256, as in the DiT paper), drawn on the "
                "run's generator so a resume is exact. A second dropout would stack on it. Remove "
                "--caption_dropout_probability."
            )
        self.check_folder(cfg)
        tr_cfg = read_component_config(cfg.model, "transformer")
        if tr_cfg is not None and (
            tr_cfg.get("norm_type", "ada_norm_zero") != "ada_norm_zero" or not tr_cfg.get("num_embeds_ada_norm")
        ):
            raise UserError(
                f"`{path}` is not a class-conditional DiT (its transformer has norm_type "
                f"{tr_cfg.get('norm_type')!r} and num_embeds_ada_norm {tr_cfg.get('num_embeds_ada_norm')!r}). "
                "Use a DiTPipeline checkpoint such as facebook/DiT-XL-2-256, or another --family."
            )
        native = GRID.generic_defaults(cfg.model, cfg.family_options).get("resolution")
        if native is not None and cfg.data.resolution != native[0]:
            raise UserError(
                f"--resolution {cfg.data.resolution} differs from this DiT's native {native[0]} px ({native[1]}): "
                f"DiTPipeline always samples at {native[0]} px. Use --resolution {native[0]}, or leave it unset."
            )
        self._check_num_classes(cfg, (tr_cfg or {}).get("num_embeds_ada_norm"))
        self._check_class_folders(cfg, (tr_cfg or {}).get("num_embeds_ada_norm"))
        sched = read_component_config(cfg.model, "scheduler", "scheduler_config.json") or {}
        if sched.get("prediction_type", "epsilon") != "epsilon":
            raise UserError(
                f"The scheduler of `{path}` has prediction_type {sched.get('prediction_type')!r}; the DiT recipe "
                "trains epsilon prediction (as DiT does) only."
            )

    def _check_num_classes(self, cfg: TrainConfig, model_classes: int | None) -> None:
        """``--num_classes`` at least 1, and at most DiTPipeline's hard-coded null id unless it is the model's."""
        num_classes = cfg.family_options.num_classes
        if num_classes is None:
            return
        if num_classes < 1:
            raise UserError(f"--num_classes must be at least 1, got {num_classes}.")
        if num_classes > PIPELINE_NULL_CLASS and num_classes != model_classes:
            raise UserError(
                f"--num_classes {num_classes} is above {PIPELINE_NULL_CLASS}: DiTPipeline hard-codes class id "
                f"{PIPELINE_NULL_CLASS} as the null class for guidance, so a resized model could not be sampled with "
                "it. Use at most 1000 classes."
            )

    def _check_class_folders(self, cfg: TrainConfig, model_classes: int | None) -> None:
        """The class-count check of ``inspect_samples``, run on the folder names before the model loads."""
        names = (
            class_folder_names(cfg.data.train_data_dir)
            if cfg.family_options.num_classes is None and not cfg.data.dataset_name
            else None
        )
        if names and model_classes:
            pretrained_rows(cfg, names, int(model_classes))

    def build_components(self, cfg: TrainConfig, loaded: LoadedParts, device: torch.device | None) -> Components:
        """The loaded (or planned) transformer and VAE as the run's components, the DDPM schedule of the checkpoint's
        betas, what the checkpoint says (label dropout, learned sigma, class count, scheduler) in its :class:`DiTRun`
        (``device`` None: the scheduler's tables stay where they are)."""
        transformer, vae, scheduler_cfg = loaded.transformer, loaded.vae, loaded.scheduler_config
        make_peft_capable(transformer)
        tables = label_embeddings(transformer)
        dropout = tables[0][1].dropout_prob if tables else DEFAULT_CLASS_DROPOUT
        for _, emb in tables:
            # Labels are dropped in compute_loss with the run's generator (resumable), not by the module.
            emb.dropout_prob = 0.0
        freeze([transformer], vae)
        base_num_classes = int(transformer.config.num_embeds_ada_norm)
        scheduler = ddpm_schedule(scheduler_cfg)
        return Components(
            model=transformer,
            scheduler=schedule_on_device(scheduler, device) if device is not None else scheduler,
            encoders={"vae": vae},
            state=DiTRun(
                scheduler_config=scheduler_cfg,
                class_dropout_prob=float(dropout),
                **output_layout(transformer),
                null_class=base_num_classes,  # rows of the class table minus the null row (after inspect_samples)
                base_num_classes=base_num_classes,
            ),
        )


#: DiT's pipeline folder, as the kit's loader reads it: class-conditional, so no text encoder or tokenizer
PARTS = PipelineParts(
    kind="DiT",
    example_id="facebook/DiT-XL-2-256",
    folder_listing="transformer/, vae/, scheduler/",
    transformer="DiTTransformer2DModel",
    vae="AutoencoderKL",
    precision=Fp32VaePrecision(text_encoder=False),  # the transformer in the run's weight dtype, the VAE in fp32
)


#: ``FamilySpec.image_buckets`` and ``defaults``: the kit's grid (the stride, 8 x 2, is still said for ``check-data``;
#: the native size, the only one DiTPipeline samples at, is the default of an uncatalogued model: ``sample_size`` 32
#: when unset, as in ``DiTTransformer2DModel``), squares only: DiTTransformer2DModel unpatchifies its output as a
#: square (``height = width = sqrt(tokens)``)
GRID = LatentGrid(
    sample_size=32,
    square=(
        "the DiT transformer takes only square inputs (diffusers' DiTTransformer2DModel unpatchifies a "
        "square), so every image is cropped to the --resolution square"
    ),
)


class DiTTrainables(DiffusionTrainables):
    """``FamilySpec.trainables``: the class tables train besides LoRA when ``--num_classes`` resizes them."""

    def backbone_patterns(self, lora: LoraOptions, family_options: FamilyOptions) -> list[str]:
        """--train_backbone, plus the class-embedding table when --num_classes resizes it.

        The backbone machinery then unfreezes it, casts it to fp32, gives it --backbone_learning_rate,
        checkpoints it and saves it to dit_lora_backbone.safetensors. Decided from the config alone, so
        LoRA setup does not depend on data preparation having run.
        """
        patterns = list(lora.train_backbone)
        num_classes = cast("DiTOptions", family_options).num_classes  # a DiT run holds DiT's options class
        if num_classes is not None and CLASS_EMBEDDING_PATTERN not in patterns:
            patterns.append(CLASS_EMBEDDING_PATTERN)
        return patterns


#: ``FamilySpec.demo``: the tiny random DiT pipeline of ``--demo_size`` (``demo.py``) and the shapes class folders at
#: its resolution
DEMO = ShapesDemo(
    lambda cfg: build_tiny_dit_pipeline(cfg.model.path, size=cfg.model.demo_size, seed=0),
    size=lambda cfg: get_tiny_dit_config(cfg.model.demo_size)["resolution"],
    classes=True,
)
