"""SANA-Video's model component and what is read from its configs before anything loads: the checks, loading (the
transformer and Gemma-2 in the run's dtype, the Wan VAE in fp32), the same components on the meta device for the
memory plan, the precision policy, the start notes, the defaults of an uncatalogued checkpoint and ``--demo``."""

from __future__ import annotations

import torch

from dit_lora.config import TrainConfig
from dit_lora.contract.family import Components
from dit_lora.core.errors import UserError
from dit_lora.families.sanavideo import demo as tiny
from dit_lora.families.sanavideo.info import EXAMPLE_ID, SanaVideoTask, forget_infos
from dit_lora.families.sanavideo.options import TRAINING_SHIFT
from dit_lora.families.sanavideo.state import SanaVideoRun
from dit_lora.kit.components import Fp32VaePrecision
from dit_lora.kit.conditioning import check_validation_image
from dit_lora.kit.demo_data import build_demo_model, demo_clips
from dit_lora.kit.info_cache import VideoNotes
from dit_lora.kit.latents import clip_statistics
from dit_lora.kit.loader import DiffusionModel, LoadedParts, PipelineParts, TextEncoder, freeze
from dit_lora.kit.video_sizes import OneClipPerStep
from dit_lora.modeling.flow_matching import flow_tables, training_scheduler


def training_shift(cfg: TrainConfig) -> float:
    """``--flow_shift``, else NVlabs' training shift (:data:`~.options.TRAINING_SHIFT`)."""
    return float(cfg.family_options.flow_shift or TRAINING_SHIFT)


def make_components(cfg: TrainConfig, transformer, vae, text_encoder, scheduler_cfg: dict, device) -> Components:
    """The loaded (or planned: ``device`` None) modules as the run's components, frozen, with the training tables
    and the VAE's latent normalisation in the run's :class:`SanaVideoRun`."""
    freeze([transformer], vae, [text_encoder])
    shift = training_shift(cfg)
    scheduler = training_scheduler(
        {"shift": shift, "num_train_timesteps": scheduler_cfg.get("num_train_timesteps", 1000)}
    )
    mean, std = clip_statistics(vae)
    state = SanaVideoRun(
        scheduler_config=scheduler_cfg,
        flow_tables=flow_tables(scheduler, device if device is not None else "cpu"),
        flow_shift=shift,
        latents_mean=mean,
        latents_std=std,
    )
    return Components(
        model=transformer, scheduler=scheduler, encoders={"vae": vae, "text_encoder": text_encoder}, state=state
    )


class SanaVideoModel(DiffusionModel):
    """``FamilySpec.model``: the folder's checks, then (the kit's loader, :data:`PARTS`) the transformer and Gemma-2
    in the run's dtype, the Wan VAE in fp32 as diffusers' docs load it, and the tokenizer."""

    def __init__(self, info, task: SanaVideoTask) -> None:
        super().__init__(info, PARTS)
        self.task = task

    def validate_config(self, cfg: TrainConfig) -> None:
        """A diffusers SANA-Video folder of safetensors with the Wan VAE, a tokenizer that loads, sizes the model
        takes; image-to-video: a ``--validation_image`` that exists."""
        self.check_folder(cfg)
        info = self.task.info(cfg.model)
        if info.vae_class != "AutoencoderKLWan":
            raise UserError(
                f"`{cfg.model.pretrained_model_name_or_path}` pairs SANA-Video with a {info.vae_class} VAE; dit-lora trains "
                "the published release's Wan 2.1 VAE (AutoencoderKLWan) only, whose latent normalisation it caches "
                f"as the pipelines apply it. Use {EXAMPLE_ID}, or a folder with its vae/."
            )
        self.task.video_buckets(cfg)  # the frame and size rules, before anything loads
        check_validation_image(cfg, "condition validation videos on the first training clip's first frame")

    def build_components(self, cfg: TrainConfig, loaded: LoadedParts, device: torch.device) -> Components:
        """:func:`make_components` (the training shift, the VAE's latent normalisation) and the tokenizer."""
        comps = make_components(
            cfg, loaded.transformer, loaded.vae, loaded.text_encoder, dict(loaded.scheduler_config), device
        )
        comps.encoders["tokenizer"] = loaded.tokenizers["tokenizer"]
        return comps


#: SANA-Video's pipeline folder, as the kit's loader reads it; its precision (``FamilySpec.precision`` too): the
#: transformer and Gemma-2 in the run's weight dtype, the Wan VAE fp32 (diffusers' SANA-Video docs)
PARTS = PipelineParts(
    kind="SANA-Video",
    example_id=EXAMPLE_ID,
    transformer="SanaVideoTransformer3DModel",
    vae="AutoencoderKLWan",
    text_encoders=(TextEncoder("AutoModel"),),
    precision=Fp32VaePrecision(),
)


class SanaVideoNotes(VideoNotes):
    """``FamilySpec.notes``: the checkpoint, the training size and fps, the shift trained with."""

    def start_notes(self, cfg: TrainConfig) -> list[str]:
        """What the run trains (the kit's line: model, task, size, fps) and the training shift against the sampling
        one."""
        return [
            self.trained_note(cfg),
            f"training shift {training_shift(cfg):g} (NVlabs' SANA-Video trainer; --flow_shift), the checkpoint's "
            f"sampler shifts by {self.task.info(cfg.model).scheduler_shift:g}",
        ]


#: ``FamilySpec.defaults``: one clip per step, as NVlabs' trainer (``train_batch_size: 1``) and SimpleTuner's quickstart
DEFAULTS = OneClipPerStep("video: one clip per step, as NVlabs' SANA-Video trainer")


class SanaVideoDemo:
    """``FamilySpec.demo``: the tiny offline SANA-Video pipeline (:mod:`.demo`) and moving-square clips."""

    def __init__(self, task: SanaVideoTask) -> None:
        self.task = task

    def prepare_demo(self, cfg: TrainConfig) -> None:
        """Build the tiny model named in ``cfg`` and, into ``--train_data_dir``, clips at its geometry. Both tasks
        build a SanaVideoPipeline folder, as the 2B release is one (image-to-video loads it into
        SanaImageToVideoPipeline), so the two demos share one model."""
        build_demo_model(
            lambda: tiny.build_tiny_sanavideo_pipeline(cfg.model.pretrained_model_name_or_path or "", seed=0)
        )
        forget_infos()  # the folder is new
        demo_clips(cfg, self.task, tiny.TINY_GEOMETRY["height"], fps=16)
