"""CogVideoX's model component and what is read from its small config files before anything loads: the config
checks, loading (transformer, VAE, T5, tokenizer; the run's :class:`~.state.CogVideoXRun`), its precision policy,
defaults and notes, and ``--demo``."""

from __future__ import annotations

from typing import TYPE_CHECKING

import torch

from dit_lora.contract.family import Components, schedule_on_device
from dit_lora.contract.spec import FamilyInfo
from dit_lora.core.errors import UserError
from dit_lora.data.frames import automatic_note
from dit_lora.families.cogvideox.demo import TINY_COGVIDEOX_GEOMETRY, build_tiny_cogvideox_pipeline
from dit_lora.families.cogvideox.info import (
    EXAMPLE_IDS,
    FAMILY_FOR,
    FPS_1_0,
    FPS_1_5,
    I2V_PIPELINE,
    KIND,
    MAX_TOKEN_RATIO,
    MIN_TOKEN_RATIO,
    T2V_PIPELINES,
    CogVideoXVideo,
    forget_model_infos,
    size_flags,
)
from dit_lora.families.cogvideox.state import CogVideoXRun
from dit_lora.kit.components import DiffusionNotes, DiffusionPrecision
from dit_lora.kit.demo_data import build_demo_model, demo_clips
from dit_lora.kit.loader import DiffusionModel, LoadedParts, PipelineParts, TextEncoder, freeze
from dit_lora.kit.video_sizes import OneClipPerStep
from dit_lora.modelfiles.pipeline_files import read_component_config, stored_dtype

if TYPE_CHECKING:
    from dit_lora.config.schema import TrainConfig


def build_components(cfg: TrainConfig, transformer, vae, text_encoder, scheduler_cfg: dict, device) -> Components:
    """The loaded (or planned, ``device`` None) modules as the run's components, frozen, with their
    :class:`~.state.CogVideoXRun`."""
    from diffusers import CogVideoXDDIMScheduler  # heavy: only when a model is built

    freeze([transformer], vae, [text_encoder])
    if cfg.family_options.enable_slicing:
        vae.enable_slicing()
    if cfg.family_options.enable_tiling:
        vae.enable_tiling()
    tc = transformer.config
    scheduler = CogVideoXDDIMScheduler.from_config(scheduler_cfg)
    return Components(
        model=transformer,
        # Training needs only alphas_cumprod: the checkpoint's betas and snr_shift_scale (2B 3.0, 5B/1.5 1.0).
        scheduler=schedule_on_device(scheduler, device) if device is not None else scheduler,
        encoders={"vae": vae, "text_encoder": text_encoder},
        state=CogVideoXRun(
            scheduler_config=scheduler_cfg,
            max_sequence_length=int(tc.max_text_seq_length),
            vae_scale_factor_spatial=2 ** (len(vae.config.block_out_channels) - 1),
            fps=FPS_1_5 if tc.patch_size_t else FPS_1_0,
        ),
    )


class CogVideoXModel(DiffusionModel):
    """``FamilySpec.model``: the folder's checks (task, transformer, text length, sizes), then (the kit's loader,
    :data:`PARTS`) the transformer, VAE and T5 in the run's weight dtype, the tokenizer and the checkpoint's
    scheduler config. ``task``: ``"t2v"`` or ``"i2v"``."""

    def __init__(self, info: FamilyInfo, task: str, video: CogVideoXVideo) -> None:
        super().__init__(info)
        self.task, self.video = task, video

    def validate_config(self, cfg: TrainConfig) -> None:
        """A CogVideoX pipeline folder of this task, at a text length and video sizes the model runs."""
        path = cfg.model.pretrained_model_name_or_path
        self.check_folder(cfg)
        info = self.video.model_info(cfg.model)
        self._check_task(cfg, info)
        buckets = self.video.video_buckets(cfg)
        if cfg.data.max_sequence_length is not None and cfg.data.max_sequence_length != info.max_text_seq_length:
            raise UserError(
                f"--max_sequence_length {cfg.data.max_sequence_length} differs from this CogVideoX transformer's "
                f"max_text_seq_length {info.max_text_seq_length} (transformer/config.json of `{path}`): the pipelines "
                "pad every prompt to exactly that many T5 tokens, and the model was trained on that length. Remove "
                f"--max_sequence_length or set it to {info.max_text_seq_length}."
            )
        if info.learned_positions:
            size = (info.sample_height * info.vae_spatial, info.sample_width * info.vae_spatial)
            bad = [b for b in buckets if (b[1], b[2]) != size]
            if bad:
                flag = "--frame_buckets" if cfg.video.frame_buckets else "--height/--width"
                fix = (
                    f"Use buckets of {size[0]}x{size[1]} (e.g. {info.sample_frames}x{size[0]}x{size[1]})"
                    if cfg.video.frame_buckets
                    else f"Use --height {size[0]} --width {size[1]}"
                )
                raise UserError(
                    f"`{path}` has a learned position embedding (use_learned_positional_embeddings, like "
                    f"THUDM/CogVideoX-5b-I2V): diffusers runs it only at its trained size {size[0]}x{size[1]} px "
                    f"(height x width), but {flag} asks for {bad[0][1]}x{bad[0][2]}. {fix}."
                )
        self.video.check_trained_size(cfg)  # first: its message says what the size costs, and how to force it
        self.video.check_rope_size(cfg, buckets, info)
        self.check_validation_image(cfg)

    def _check_task(self, cfg: TrainConfig, info) -> None:
        """A CogVideoX text-to-video or image-to-video pipeline whose task is this family's."""
        path = cfg.model.pretrained_model_name_or_path
        known = T2V_PIPELINES + (I2V_PIPELINE,)
        if info.pipeline_class and info.pipeline_class not in known:
            hint = (
                "it is a CogVideoX variant this recipe does not train"
                if "CogVideoX" in info.pipeline_class
                else "use the --family of that model"
            )
            raise UserError(
                f"`{path}` is not a CogVideoX text-to-video or image-to-video pipeline: its model_index.json names "
                f"{info.pipeline_class} ({hint}). recipes/cogvideox_lora.py trains {', '.join(known)} checkpoints, "
                f"e.g. {EXAMPLE_IDS['t2v']} or {EXAMPLE_IDS['i2v']}."
            )
        tr_cfg = read_component_config(cfg.model, "transformer")
        transformer_class = (tr_cfg or {}).get("_class_name", "CogVideoXTransformer3DModel")
        if transformer_class != "CogVideoXTransformer3DModel":
            raise UserError(
                f"`{path}`: transformer/config.json is a {transformer_class}, not a "
                "CogVideoXTransformer3DModel. Point --pretrained_model_name_or_path at a CogVideoX pipeline."
            )
        if tr_cfg is not None and info.task is None:
            raise UserError(
                f"`{path}`: transformer/config.json in_channels {tr_cfg.get('in_channels')} is neither the VAE's latent "
                "channels (text-to-video) nor twice them (image-to-video); recipes/cogvideox_lora.py trains neither "
                "kind of model here (e.g. CogVideoX-Fun control/inpaint models are not supported)."
            )
        if info.task and info.task != self.task:
            raise UserError(
                f"`{path}` is {'an' if info.task == 'i2v' else 'a'} {KIND[info.task]} CogVideoX checkpoint "
                f"({info.evidence}), but --family {FAMILY_FOR[self.task]} "
                f"trains {KIND[self.task]}. Use --family {FAMILY_FOR[info.task]} (recipes/cogvideox_lora.py "
                "trains both)."
            )

    def check_validation_image(self, cfg: TrainConfig) -> None:
        """Text-to-video has no conditioning image (image-to-video checks ``--validation_image``)."""

    def pipeline_parts(self, cfg: TrainConfig) -> PipelineParts:
        """:data:`PARTS` of the family's task."""
        return PARTS[self.task]

    def build_components(self, cfg: TrainConfig, loaded: LoadedParts, device: torch.device) -> Components:
        """:func:`build_components` (the checkpoint's scheduler, :class:`~.state.CogVideoXRun`) and the tokenizer."""
        comps = build_components(
            cfg, loaded.transformer, loaded.vae, loaded.text_encoder, loaded.scheduler_config, device
        )
        comps.encoders["tokenizer"] = loaded.tokenizers["tokenizer"]
        return comps


class CogVideoXPrecision(DiffusionPrecision):
    """``FamilySpec.precision``: transformer, VAE and T5 in the run's weight dtype (bf16 by default)."""

    def expected_dtypes(self, comps: Components, weight_dtype: torch.dtype) -> dict[str, torch.dtype]:
        """Transformer, VAE and T5 in the run's weight dtype, as the reference trainers."""
        return {"model": weight_dtype, "vae": weight_dtype, "text_encoder": weight_dtype}


#: each task's pipeline folder, as the kit's loader reads it: everything in the run's weight dtype, as the reference
#: trainers; the scheduler config as CogVideoXDDIMScheduler reads it (training needs only its alphas_cumprod)
PARTS = {
    task: PipelineParts(
        kind="CogVideoX",
        example_id=example_id,
        folder_listing="transformer/, vae/, text_encoder/, tokenizer/, scheduler/",
        transformer="CogVideoXTransformer3DModel",
        vae="AutoencoderKLCogVideoX",
        vae_dtype="weight",
        text_encoders=(TextEncoder("T5EncoderModel"),),
        scheduler="CogVideoXDDIMScheduler",
        precision=CogVideoXPrecision(),
    )
    for task, example_id in EXAMPLE_IDS.items()
}


#: ``FamilySpec.defaults``: one clip per step (a 49-frame clip is 13 latent frames of tokens; every published recipe
#: uses batch 1)
DEFAULTS = OneClipPerStep("video: one clip per step, as THUDM's and diffusers' CogVideoX trainers")


class CogVideoXNotes(DiffusionNotes):
    """``FamilySpec.notes``: the video size and why; stored fp16 weights; an unused learned position table."""

    def __init__(self, video: CogVideoXVideo) -> None:
        self.video = video

    def start_notes(self, cfg: TrainConfig) -> list[str]:
        """One line: the video size(s) the run trains at, where they come from, and the trained size."""
        info = self.video.model_info(cfg.model)
        frames, height, width, why = info.trained_size()
        buckets = self.video.video_buckets(cfg)
        # An automatic set is named by its first bucket (the default size); the note's end says what else there is.
        chosen = ", ".join(f"{f}x{h}x{w}" for f, h, w in (buckets if cfg.video.frame_buckets else buckets[:1]))
        also = automatic_note(buckets, automatic=not cfg.video.frame_buckets)
        given = [f"--{name}" for name in ("height", "width", "max_num_frames") if getattr(cfg.video, name)]
        if not cfg.video.frame_buckets and not given:
            return [
                f"video size: {chosen} (frames x height x width), the size the checkpoint was trained at ({why}){also}."
            ]
        source = size_flags(cfg) + ("" if cfg.video.frame_buckets or len(given) == 3 else ", the rest the trained size")
        trained = info.latent_tokens(frames, height, width)
        outside = [b for b in buckets if not MIN_TOKEN_RATIO <= info.latent_tokens(*b) / trained <= MAX_TOKEN_RATIO]
        forced = "; far from it, allowed by --allow_untrained_resolution" if outside else ""
        return [
            f"video size: {chosen} (frames x height x width) from {source}; the checkpoint was trained at "
            f"{frames}x{height}x{width} ({why}){forced}{also}."
        ]

    def precision_notes(self, cfg: TrainConfig) -> list[str]:
        """Stored fp16 weights (CogVideoX-2b); a learned position table replaced at another frame count."""
        notes = []
        name = cfg.model.path
        dtype = stored_dtype(cfg.model)
        if dtype == "F16" or (dtype is None and name.lower().endswith("cogvideox-2b")):
            notes.append(
                f"`{name}` stores fp16 weights (CogVideoX-2b was trained in fp16). They load in the run's dtype "
                f"({cfg.training.mixed_precision}); bf16 (the default) is fine for LoRA training: it has fp32's range, so "
                "nothing overflows, at a small precision cost."
            )
        info = self.video.model_info(cfg.model)
        if info.learned_positions:
            frames = sorted({b[0] for b in self.video.video_buckets(cfg) if b[0] != info.sample_frames})
            if frames:
                notes.append(
                    f"`{name}` has a learned position table for {info.sample_frames} frames; at "
                    f"{', '.join(map(str, frames))} frames diffusers replaces it by fixed sin-cos positions "
                    "(CogVideoXPatchEmbed.forward), in training and at inference, so the learned table goes unused. "
                    f"Train at {info.sample_frames} frames (--max_num_frames) to keep it."
                )
        return notes


class CogVideoXDemo:
    """``FamilySpec.demo``: the tiny random CogVideoX pipeline of the task (``demo.py``) and moving-square clips."""

    def __init__(self, task: str, video: CogVideoXVideo) -> None:
        self.task, self.video = task, video

    def prepare_demo(self, cfg: TrainConfig) -> None:
        """Build the tiny model named in ``cfg`` and, into an empty ``--train_data_dir``, the clips."""
        # The demo builders: only for --demo
        try:
            build_demo_model(
                lambda: build_tiny_cogvideox_pipeline(
                    cfg.model.path, task=self.task, version=cfg.family_options.demo_cogvideox_version, seed=0
                )
            )
        except ValueError as err:  # e.g. there is no 2B image-to-video model
            raise UserError(f"--demo_cogvideox_version {cfg.family_options.demo_cogvideox_version}: {err}.")
        forget_model_infos()  # the model may have just been (re)built
        demo_clips(cfg, self.video, TINY_COGVIDEOX_GEOMETRY["height"], fps=self.video.model_info(cfg.model).fps)
