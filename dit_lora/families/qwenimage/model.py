"""Qwen-Image's model component and what is read from its small config files before anything loads: the config
checks, the resolution it takes, its precision policy, its aspect-ratio buckets, and ``--demo``."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import torch

from dit_lora.contract.family import Components
from dit_lora.core.errors import UserError
from dit_lora.data.synthetic.shapes import check_demo_resolution
from dit_lora.families.qwenimage import demo as tiny_qwenimage  # looked up at call time: tests stand in the build
from dit_lora.families.qwenimage.encoders import MAX_SEQUENCE_LENGTH, max_sequence_length
from dit_lora.families.qwenimage.processor import load_processor
from dit_lora.families.qwenimage.state import QwenImageRun
from dit_lora.kit.builder import AnyAspect, check_divisible
from dit_lora.kit.components import Fp32VaePrecision
from dit_lora.kit.conditioning import check_validation_image
from dit_lora.kit.demo_data import add_control_images, demo_data
from dit_lora.kit.edit_data import refuse_edit_options
from dit_lora.kit.loader import DiffusionModel, LoadedParts, PipelineParts, TextEncoder
from dit_lora.modelfiles.pipeline_files import read_component_config

if TYPE_CHECKING:
    from dit_lora.config.schema import FamilyOptions, ModelOptions, TrainConfig

#: why an Edit run refuses caption dropout (the kit refuses --random_flip and uncached latents for every edit model)
DROPOUT = "the dropped caption is encoded once without the sample's control images"
#: the latent stride: the VAE's 8x times the transformer's 2 x 2 patches (QwenImagePipeline's
#: ``vae_scale_factor * 2``, what ``height`` and ``width`` must be divisible by)
LATENT_STRIDE = 16
#: ``FamilySpec.image_buckets``: any aspect ratio (the transformer's RoPE takes each image's own latent height and
#: width, ``img_shapes``), in steps of the latent stride
BUCKETS = AnyAspect(LATENT_STRIDE)
EXAMPLE_ID = "Qwen/Qwen-Image"


def check_resolution(resolution: int) -> None:
    """Refuse a ``--resolution`` the pipeline would silently resize, suggesting the nearest sizes it takes."""
    why = (
        "Qwen-Image's VAE compresses 8x and its transformer packs 2 x 2 latent patches, and QwenImagePipeline "
        "resizes other sizes (see --resolution)"
    )
    check_divisible(resolution, LATENT_STRIDE, why)


def check_text_length(cfg: TrainConfig) -> None:
    """Refuse a ``--max_sequence_length`` above the pipeline's 1024."""
    if max_sequence_length(cfg.data) > MAX_SEQUENCE_LENGTH:
        raise UserError(
            f"--max_sequence_length {cfg.data.max_sequence_length} is above {MAX_SEQUENCE_LENGTH}, the longest caption "
            f"QwenImagePipeline encodes (it refuses more at inference). Use {MAX_SEQUENCE_LENGTH} or less."
        )


class QwenImageModel(DiffusionModel):
    """``FamilySpec.model``: the folder's checks, then (the kit's loader, :data:`PARTS`) the transformer and
    Qwen2.5-VL in the run's weight dtype, the VAE in fp32, and the tokenizer."""

    def validate_config(self, cfg: TrainConfig) -> None:
        """A diffusers Qwen-Image folder of safetensors whose tokenizer can load, at a size the pipeline takes."""
        self.check_folder(cfg)
        check_resolution(cfg.data.resolution)
        check_text_length(cfg)

    def build_components(self, cfg: TrainConfig, loaded: LoadedParts, device: torch.device) -> Components:
        """The checkpoint's scheduler and the VAE's latent normalisation in the run's :class:`QwenImageRun`."""
        from diffusers import FlowMatchEulerDiscreteScheduler  # heavy: only when a run loads

        vae_cfg = loaded.vae.config
        state = QwenImageRun(
            scheduler_config=dict(loaded.scheduler_config),
            latents_mean=tuple(vae_cfg.latents_mean),
            latents_std=tuple(vae_cfg.latents_std),
        )
        return loaded.components(FlowMatchEulerDiscreteScheduler.from_config(loaded.scheduler_config), state)


class QwenImageEditModel(QwenImageModel):
    """``FamilySpec.model`` of the Edit models: text-to-image's checks and loading, plus the processor through which
    Qwen2.5-VL sees the control images; the options an edit run cannot take refused."""

    def validate_config(self, cfg: TrainConfig) -> None:
        """Text-to-image's checks, the refused options (the kit's ``refuse_edit_options``), a given ``--validation_image``."""
        super().validate_config(cfg)
        refuse_edit_options(cfg, "Qwen-Image-Edit", dropout=DROPOUT)
        check_validation_image(cfg, "take the first training sample's control image")

    def extra_encoders(self, cfg: TrainConfig, common: dict[str, Any]) -> dict[str, Any]:
        """The repo's ``processor/`` (Qwen2VLProcessor: the image processor and the tokenizer)."""
        return {"processor": load_processor(cfg.model.path, cfg.model.revision)}


class QwenImagePrecision(Fp32VaePrecision):
    """``FamilySpec.precision``: transformer and Qwen2.5-VL in the run's weight dtype; the VAE stays fp32."""


#: Qwen-Image's pipeline folder, as the kit's loader reads it (the VAE in fp32, as diffusers' DreamBooth script
#: loads it: the latents are cached from it once)
PARTS = PipelineParts(
    kind="Qwen-Image",
    example_id=EXAMPLE_ID,
    folder_listing="transformer/, vae/, text_encoder/, tokenizer/",
    transformer="QwenImageTransformer2DModel",
    vae="AutoencoderKLQwenImage",
    text_encoders=(TextEncoder("Qwen2_5_VLForConditionalGeneration"),),
    precision=QwenImagePrecision(),
)


class QwenImageDefaults:
    """``FamilySpec.defaults``: an uncatalogued Qwen-Image model gets the pipeline's own default size."""

    def generic_defaults(self, model: ModelOptions, family_options: FamilyOptions) -> dict[str, tuple[Any, str]]:
        """1024 px: QwenImagePipeline's ``default_sample_size`` 128 x the VAE's 8 (the catalogue's entries say more)."""
        if not read_component_config(model, "transformer"):
            return {}
        return {"resolution": (1024, "QwenImagePipeline's default_sample_size 128 x the VAE's 8")}


class QwenImageDemo:
    """``FamilySpec.demo``: the tiny random Qwen-Image pipeline (``demo.py``) of the family's variant and the shapes
    data set (for the Edit models with control images: the kit's ``add_control_images``)."""

    def __init__(self, variant: str = "t2i") -> None:
        self.variant = variant

    def prepare_demo(self, cfg: TrainConfig) -> None:
        """Build the tiny model named in ``cfg`` and, into an empty ``--train_data_dir``, the shapes images."""
        check_resolution(cfg.data.resolution)
        check_demo_resolution(cfg.data.resolution)
        tiny_qwenimage.build_tiny_qwenimage_pipeline(cfg.model.path, self.variant, seed=0)
        data = cfg.data.train_data_dir
        if data is not None and demo_data(cfg) and self.variant != "t2i":
            add_control_images(data, per_sample=2 if self.variant == "edit_plus" else 1)
