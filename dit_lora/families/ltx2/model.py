"""LTX-2's model component: the checks, loading (the transformer, Gemma-3 and the text connectors in the run's dtype,
the video and audio VAEs in fp32), the precision policy, the start notes, the defaults and ``--demo``."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, cast

import torch

from dit_lora.config import TrainConfig
from dit_lora.config.schema import FamilyOptions, ModelOptions, TrainingOptions
from dit_lora.contract.family import Components
from dit_lora.core.errors import UserError
from dit_lora.core.quiet import dtype_kwarg
from dit_lora.families.ltx2 import demo as tiny
from dit_lora.families.ltx2.encoders import max_sequence_length
from dit_lora.families.ltx2.info import EXAMPLE_ID, LTX2Task, forget_infos
from dit_lora.families.ltx2.state import LTX2Run
from dit_lora.kit.clip_audio import refuse_uniform
from dit_lora.kit.components import Fp32VaePrecision
from dit_lora.kit.conditioning import check_validation_image
from dit_lora.kit.demo_data import build_demo_model, demo_clips
from dit_lora.kit.info_cache import VideoNotes
from dit_lora.kit.loader import DiffusionModel, LoadedParts, PipelineParts, TextEncoder, freeze, model_class
from dit_lora.kit.reference_clips import check_reference_config
from dit_lora.kit.video_sizes import OneClipPerStep
from dit_lora.modeling.flow_matching import flow_tables, training_scheduler

if TYPE_CHECKING:
    from dit_lora.families.ltx2.options import LTX2AudioOptions


def with_audio(options: LTX2AudioOptions) -> bool:
    """``--audio on`` (``options``: the run's ``cfg.family_options``)."""
    return options.audio == "on"


def make_components(
    cfg: TrainConfig, transformer, vae, text_encoder, extra: dict, scheduler_cfg: dict, device
) -> Components:
    """The loaded (or planned: ``device`` None) modules as the run's components, frozen, with the training tables,
    the video VAE's latent normalisation and the audio geometry in the run's :class:`LTX2Run`."""
    from dit_lora.kit.clip_audio import AudioGeometry

    freeze([transformer], vae, [text_encoder, *extra.values()])
    scheduler = training_scheduler({"num_train_timesteps": scheduler_cfg.get("num_train_timesteps", 1000)})
    state = LTX2Run(
        scheduler_config=scheduler_cfg,
        flow_tables=flow_tables(scheduler, device if device is not None else "cpu"),
        latents_mean=vae.latents_mean.detach().float().view(1, -1, 1, 1, 1).clone(),
        latents_std=vae.latents_std.detach().float().view(1, -1, 1, 1, 1).clone(),
        scaling_factor=float(getattr(vae.config, "scaling_factor", 1.0) or 1.0),
        vae_temporal=int(vae.temporal_compression_ratio),
        audio=AudioGeometry.from_config(extra["audio_vae"].config),
        with_audio=with_audio(cfg.family_options),
        audio_width=int(transformer.config.audio_in_channels),
    )
    return Components(
        model=transformer,
        scheduler=scheduler,
        encoders={"vae": vae, "text_encoder": text_encoder, **extra},
        state=state,
    )


def check_caption_length(cfg: TrainConfig) -> None:
    """Refuse a ``--max_sequence_length`` the text connectors' learnable registers do not divide (they take the
    padding's places in blocks: ``LTX2ConnectorTransformer1d`` raises otherwise), read from ``connectors/config.json``
    before anything loads (through the catalogue for a Hub id that is not downloaded)."""
    from dit_lora.catalogue.defaults import config_reader

    registers = (config_reader(cfg.model)("connectors", "config.json") or {}).get(
        "video_connector_num_learnable_registers"
    )
    length = max_sequence_length(cfg.data)
    if registers and length % int(registers):
        fixed = max(int(registers), round(length / int(registers)) * int(registers))
        raise UserError(
            f"--max_sequence_length {length} is not a multiple of {registers}, the text connectors' learnable "
            f"registers (they take the padding's places in blocks of {registers}). Use {fixed}."
        )


class LTX2Model(DiffusionModel):
    """``FamilySpec.model``: the folder's checks, then (the kit's loader, :data:`PARTS`) the transformer and Gemma-3
    in the run's dtype, the video VAE in fp32, the tokenizer, the audio VAE (fp32) and the text connectors."""

    def __init__(self, info, task: LTX2Task) -> None:
        super().__init__(info, PARTS)
        self.task = task

    def validate_config(self, cfg: TrainConfig) -> None:
        """A diffusers LTX-2 folder of safetensors, a tokenizer that loads, sizes the model takes; with sound, the
        frames taken consecutively and the latent cache (the sound is encoded into it only)."""
        self.check_folder(cfg)
        self.task.video_buckets(cfg)  # the frame and size rules, before anything loads
        check_caption_length(cfg)
        if self.task.task == "i2v":
            check_validation_image(cfg, "animate the first training clip's first frame in validation clips")
        if self.task.task == "ic":
            check_reference_config(cfg, self.task, "LTX-2 IC-LoRA")
        if not with_audio(cfg.family_options):
            return
        refuse_uniform(cfg.video.frame_sampling, "LTX-2")
        if not cfg.data.cache_latents:
            raise UserError(
                "--cache_latents false is not supported for LTX-2 with --audio on: each clip's sound is decoded and "
                "encoded into the latent cache beside its frames, nowhere else. Leave --cache_latents at its default, "
                "or pass --audio off to train the video alone."
            )

    def extra_encoders(self, cfg: TrainConfig, common: dict[str, Any]) -> dict[str, Any]:
        """The audio VAE (fp32) and the text connectors (the run's dtype), inside the load's ``try``."""
        from diffusers.pipelines.ltx2 import LTX2TextConnectors  # heavy: only when a run loads

        path = cfg.model.pretrained_model_name_or_path
        audio_vae = model_class("diffusers", "AutoencoderKLLTX2Audio").from_pretrained(
            path, subfolder="audio_vae", **dtype_kwarg("diffusers", torch.float32), **common
        )
        connectors = LTX2TextConnectors.from_pretrained(
            path, subfolder="connectors", **dtype_kwarg("diffusers", cfg.weight_dtype), **common
        )
        return {"audio_vae": audio_vae, "connectors": connectors}

    def build_components(self, cfg: TrainConfig, loaded: LoadedParts, device: torch.device) -> Components:
        """:func:`make_components` and the tokenizer."""
        comps = make_components(
            cfg,
            loaded.transformer,
            loaded.vae,
            loaded.text_encoder,
            loaded.extra,
            dict(loaded.scheduler_config),
            device,
        )
        comps.encoders["tokenizer"] = loaded.tokenizers["tokenizer"]
        return comps


#: LTX-2's pipeline folder, as the kit's loader reads it; its precision (``FamilySpec.precision`` too): the transformer
#: and Gemma-3 in the run's weight dtype, the video VAE fp32
PARTS = PipelineParts(
    kind="LTX-2",
    example_id=EXAMPLE_ID,
    transformer="LTX2VideoTransformer3DModel",
    vae="AutoencoderKLLTX2Video",
    text_encoders=(TextEncoder("Gemma3ForConditionalGeneration"),),
    precision=Fp32VaePrecision(),
)


def count_silent(samples: list) -> tuple[int, int]:
    """``(clips without an audio track, clips)`` among ``samples`` (an image counts as a clip without one; a file
    PyAV cannot open counts as silent: screening has already judged it)."""
    from dit_lora.data.audio import has_audio
    from dit_lora.data.video_sample import VideoDecodeError

    silent = 0
    for sample in samples:
        try:
            sounding = not getattr(sample, "is_image", False) and has_audio(sample.path)
        except VideoDecodeError:
            sounding = False
        silent += not sounding
    return silent, len(samples)


class LTX2Notes(VideoNotes):
    """``FamilySpec.notes``: the checkpoint, the training size and fps, the sound."""

    def sample_notes(self, training: TrainingOptions, family_options: FamilyOptions, samples: list) -> list[str]:
        """With ``--audio on``, how many clips have no audio track (never silently: their audio part is masked); with
        batches of several clips, clips of several frame rates (a batch places its video at its first clip's)."""
        lines = []
        if with_audio(cast("LTX2AudioOptions", family_options)) and samples:  # an LTX-2 run holds an LTX-2 class
            silent, total = count_silent(samples)
            lines.append(
                f"sound: all {total} clips have an audio track"
                if not silent
                else f"sound: {silent} of {total} clips have no audio track (images count as such): their video "
                "trains, their audio part is masked out of the loss, never learned as silence (--audio off trains "
                "every clip's video alone)"
            )
        rates = sorted({round(float(getattr(s, "source_fps", 0) or 0), 3) for s in samples} - {0.0})
        if training.train_batch_size > 1 and len(rates) > 1:
            shown = ", ".join(f"{r:g}" for r in rates[:6]) + (" ..." if len(rates) > 6 else "")
            lines.append(
                f"frame rates: the clips come at {len(rates)} rates ({shown} fps); a batch of "
                f"{training.train_batch_size} places all its clips' video in time at its first clip's rate (each "
                "clip's sound keeps its own span). --train_batch_size 1 (LTX-2's default) places every clip at its own."
            )
        return lines

    def start_notes(self, cfg: TrainConfig) -> list[str]:
        """What the run trains (model, size, fps) and whether the sound trains with it."""
        sound = (
            f"sound: each clip's own track over its frames' span, audio loss weight "
            f"{cfg.family_options.audio_loss_weight:g} (--audio_loss_weight); clips without a track train their video "
            "alone"
            if with_audio(cfg.family_options)
            else "sound: off (--audio off): the video alone"
        )
        return [self.trained_note(cfg, rate="; positions at each clip's own frame rate"), sound]


class LTX2Defaults(OneClipPerStep):
    """``FamilySpec.defaults``: one clip per step, as Lightricks' LTX-2 trainer's configs (``batch_size: 1``), and,
    with sound, consecutive frames (``--frame_sampling first``: the span the sound is cut to)."""

    def generic_defaults(self, model: ModelOptions, family_options: FamilyOptions) -> dict[str, tuple[Any, str]]:
        """``train_batch_size`` 1 and, with ``--audio on``, ``frame_sampling`` first."""
        out = super().generic_defaults(model, family_options)
        if with_audio(cast("LTX2AudioOptions", family_options)):  # an LTX-2 run holds an LTX-2 options class
            out["frame_sampling"] = ("first", "audio: consecutive frames, whose span the clip's sound is cut to")
        return out


DEFAULTS = LTX2Defaults("video: one clip per step, as Lightricks' LTX-2 trainer")


class LTX2Demo:
    """``FamilySpec.demo``: the tiny offline LTX-2 pipeline (:mod:`.demo`) and moving-square clips, a tone on every
    other one."""

    def __init__(self, task: LTX2Task) -> None:
        self.task = task

    def prepare_demo(self, cfg: TrainConfig) -> None:
        """Build the tiny model named in ``cfg`` and, into ``--train_data_dir``, clips at its geometry with sound on
        half of them (the other half trains its video alone)."""
        build_demo_model(lambda: tiny.build_tiny_ltx2_pipeline(cfg.model.pretrained_model_name_or_path or "", seed=0))
        forget_infos()  # the folder is new
        g = tiny.TINY_GEOMETRY
        demo_clips(cfg, self.task, g["height"], fps=g["fps"], sound="mixed", references=self.task.task == "ic")
