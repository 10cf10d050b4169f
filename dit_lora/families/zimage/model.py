"""Z-Image's model component and what is read from its small config files before anything loads: the config
checks, the resolutions it takes, its defaults, its precision policy, the distilled-checkpoint note, its
aspect-ratio buckets, and ``--demo``."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import torch

from dit_lora.catalogue import match
from dit_lora.catalogue.defaults import config_reader
from dit_lora.contract.family import Components
from dit_lora.families.zimage import demo as tiny_zimage  # looked up at call time: tests stand in the build
from dit_lora.families.zimage.state import ZImageRun
from dit_lora.kit.builder import AnyAspect, check_divisible
from dit_lora.kit.components import DiffusionNotes, Fp32VaePrecision, ShapesDemo
from dit_lora.kit.loader import DiffusionModel, LoadedParts, model_configs, published_parts
from dit_lora.modelfiles.pipeline_files import read_component_config, stored_dtype
from dit_lora.modeling.flow_matching import flow_tables, training_scheduler

if TYPE_CHECKING:
    from dit_lora.config.schema import FamilyOptions, ModelOptions, TrainConfig

#: the repo id the folder checks suggest
EXAMPLE_REPO = "Tongyi-MAI/Z-Image"


def latent_stride(tr_cfg: dict, vae_cfg: dict) -> int:
    """Pixels per transformer token side: the VAE's downsampling x the patch size (8 x 2 = 16 for Z-Image).

    ZImagePipeline also requires sizes divisible by ``vae_scale_factor * 2``, the same number."""
    vae = 2 ** (len(vae_cfg.get("block_out_channels", [0] * 4)) - 1)
    return vae * int((tr_cfg.get("all_patch_size") or [2])[0])


def check_resolution(resolution: int, tr_cfg: dict, vae_cfg: dict) -> None:
    """Refuse a ``--resolution`` the transformer or ZImagePipeline cannot take, naming the nearest sizes."""
    stride, patch = latent_stride(tr_cfg, vae_cfg), int((tr_cfg.get("all_patch_size") or [2])[0])
    why = (
        f"this Z-Image's VAE downsamples {stride // patch}x and its transformer takes {patch}x{patch} patches, and "
        f"ZImagePipeline (which draws the validation and final samples) takes only sizes divisible by {stride}"
    )
    check_divisible(resolution, stride, why)


class ZImageModel(DiffusionModel):
    """``FamilySpec.model``: the folder's checks, then (the kit's loader, :data:`PARTS`) the transformer and Qwen3 in
    the run's weight dtype, the VAE in fp32, and the tokenizer."""

    def validate_config(self, cfg: TrainConfig) -> None:
        """A diffusers Z-Image folder of safetensors whose tokenizer can load, at a resolution the model takes."""
        self.check_folder(cfg)
        vae_cfg = read_component_config(cfg.model, "vae")
        if vae_cfg is not None:
            check_resolution(cfg.data.resolution, read_component_config(cfg.model, "transformer") or {}, vae_cfg)

    def build_components(self, cfg: TrainConfig, loaded: LoadedParts, device: torch.device) -> Components:
        """The checkpoint's scheduler config (its shift replaced by ``--flow_shift``) and the training tables in
        the run's :class:`ZImageRun`."""
        scheduler_cfg = loaded.scheduler_config
        scheduler = training_scheduler(with_flow_shift(scheduler_cfg, cfg.family_options.flow_shift))
        return loaded.components(
            scheduler, ZImageRun(scheduler_config=scheduler_cfg, flow_tables=flow_tables(scheduler, device))
        )


class ZImagePrecision(Fp32VaePrecision):
    """``FamilySpec.precision``: transformer and Qwen3 in the run's weight dtype; the VAE stays fp32; the embedders
    kept out of ``--quantize_base``."""

    def quantize_skip_modules(self) -> list[str]:
        """The embedders diffusers keeps out of layerwise casting (``_skip_layerwise_casting_patterns``: the
        timestep and caption embedders are precision sensitive) and the per-patch in/out projections."""
        return ["t_embedder", "cap_embedder", "all_x_embedder", "all_final_layer"]


#: Z-Image's pipeline folder, as the kit's loader reads it. The VAE in fp32: the latents are cached once, and a
#: bf16 encode would lose what the fp32 load keeps. ZImagePipeline's model_index names Qwen3Model (the hidden
#: states, no LM head): AutoModel loads it.
PARTS = published_parts(EXAMPLE_REPO, kind="Z-Image", text_encoder_class="AutoModel", precision=ZImagePrecision())


def is_turbo(cfg: TrainConfig) -> bool:
    """Whether the model is the step-distilled Z-Image-Turbo (its catalogue entry, or its name)."""
    entry = match("zimage", config_reader(cfg.model), stored_dtype(cfg.model))
    if entry is not None:
        return "Turbo" in entry.hub_id
    return "turbo" in str(cfg.model.pretrained_model_name_or_path).lower()


class ZImageNotes(DiffusionNotes):
    """``FamilySpec.notes``: training the step-distilled Turbo is said, with what the other trainers do."""

    def start_notes(self, cfg: TrainConfig) -> list[str]:
        """A warning when the model is Z-Image-Turbo (8-step distilled, no CFG)."""
        if not cfg.model.pretrained_model_name_or_path or not is_turbo(cfg):
            return []
        return [
            "this is Z-Image-Turbo, a step-distilled model: a LoRA trained on it directly drifts the distillation "
            "(users report washed-out or generic samples after a few thousand steps, musubi-tuner issue 771). "
            "Prefer the base model, Tongyi-MAI/Z-Image (same architecture; its LoRAs also load on Turbo), or a "
            "de-distilled copy (ostris/Z-Image-De-Turbo, a ComfyUI single file: --transformer_file); dit-lora does "
            "not merge ostris' training adapter. Keep runs short and validate at 8 steps, guidance 0"
        ]


class ZImageDefaults:
    """``FamilySpec.defaults``: what an uncatalogued Z-Image model's configs imply."""

    def generic_defaults(self, model: ModelOptions, family_options: FamilyOptions) -> dict[str, tuple[Any, str]]:
        """The VAE's ``sample_size`` as the resolution (1024 for the FLUX.1 VAE the releases ship)."""
        vae_cfg = read_component_config(model, "vae")
        if not (vae_cfg and vae_cfg.get("sample_size")):
            return {}
        return {"resolution": (int(vae_cfg["sample_size"]), "the VAE's sample_size")}


class ZImageBuckets(AnyAspect):
    """``FamilySpec.image_buckets``: any aspect ratio (the transformer patchifies any grid and its 3-axis RoPE
    positions follow it), in the latent stride."""

    def bucket_stride(self, model: ModelOptions) -> int:
        """VAE downsampling x patch size (8 x 2), from the model's configs (their defaults without a model)."""
        return latent_stride(*model_configs(model, "transformer", "vae"))


def check_demo_size(cfg: TrainConfig) -> None:
    """``FamilySpec.demo``'s check (:class:`~dit_lora.kit.components.ShapesDemo`): ``--resolution``
    against the demo model's config, nothing built yet."""
    tiny = tiny_zimage.get_tiny_zimage_config()
    check_resolution(cfg.data.resolution, tiny["transformer"], tiny["vae"])


#: ``FamilySpec.demo``: the tiny Z-Image (``demo.py``) and the shapes, its size checked first
DEMO = ShapesDemo.tiny(tiny_zimage, "build_tiny_zimage_pipeline", check=check_demo_size)


def with_flow_shift(scheduler_cfg: dict, flow_shift: float | None) -> dict:
    """The scheduler config the training schedule is built from: the checkpoint's, its shift replaced by
    ``--flow_shift`` when given (musubi-tuner advises 2.0 for Z-Image; validation keeps the checkpoint's)."""
    return (
        dict(scheduler_cfg) if flow_shift is None else {**scheduler_cfg, "shift": flow_shift, "flow_shift": flow_shift}
    )
