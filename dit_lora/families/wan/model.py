"""Wan's model component: the checks before any weight loads (the folder, the checkpoint kind against ``--family``,
the experts and TI2V options against the checkpoint, the prompt length and the video size; each refusal one
paragraph), loading the checkpoint for training (weights) or for the memory plan (configs on the meta device),
precision, the start notes, the defaults of an uncatalogued checkpoint and the demo.

Only the trained expert(s) of an A14B checkpoint are read: ``--wan_expert high`` never loads ``transformer_2``.
With ``--wan_expert both`` and ``--offload_inactive_expert`` on an accelerator, only ``high``'s weights go to the
device; ``low``'s stay in CPU memory (``WanExperts.place``), as the memory plan counts.
"""

from __future__ import annotations

import os
from typing import Any

import torch

from dit_lora.config import TrainConfig
from dit_lora.config.adapter_types import TYPES
from dit_lora.config.schema import ModelOptions
from dit_lora.contract.family import Components
from dit_lora.core.engine import decide_engine
from dit_lora.core.errors import UserError
from dit_lora.data.frames import automatic_note
from dit_lora.families.wan.demo import TINY_WAN_GEOMETRY, build_tiny_wan_pipeline
from dit_lora.families.wan.experts import WanExperts, expert_index_ranges
from dit_lora.families.wan.info import (
    EXAMPLE_IDS,
    FAMILY_FOR,
    I2V_PIPELINE,
    KIND,
    MAX_TOKEN_RATIO,
    T2V_PIPELINE,
    TEXT_LEN,
    WanTask,
    forget_infos,
)
from dit_lora.families.wan.options import WanOptions
from dit_lora.families.wan.state import WanRun
from dit_lora.kit.components import DiffusionPrecision
from dit_lora.kit.demo_data import build_demo_model, demo_clips
from dit_lora.kit.info_cache import VideoNotes
from dit_lora.kit.latents import clip_statistics
from dit_lora.kit.loader import DiffusionModel, LoadedParts, PipelineParts, TextEncoder, freeze, load_pipeline
from dit_lora.kit.peft_capable import make_peft_capable
from dit_lora.kit.video_sizes import OneClipPerStep
from dit_lora.modelfiles.pipeline_files import (
    check_pipeline_folder,
    check_safetensors,
    read_component_config,
)
from dit_lora.modeling.flow_matching import flow_tables, training_scheduler
from dit_lora.plan.fake import diffusers_on_meta, transformers_on_meta, with_depth
from dit_lora.setup.tokenizer_check import check_tokenizer_packages

#: subfolder of each expert in the pipeline folder
SUBFOLDER = {"high": "transformer", "low": "transformer_2"}


def trained_experts(task: WanTask, model: ModelOptions, options: WanOptions) -> list[str]:
    """The transformers this run loads: ``["high"]`` (single-expert checkpoints, or --wan_expert high),
    ``["low"]`` or ``["high", "low"]`` (``model``, ``options``: the run's ``cfg.model`` and ``cfg.family_options``)."""
    expert = task.expert(model, options)
    return ["high", "low"] if expert == "both" else [expert or "high"]


def load_wan_components(model: WanModel, cfg: TrainConfig, device: torch.device) -> Components:
    """The kit's loader (:func:`~dit_lora.kit.loader.load_pipeline`) on :data:`PARTS`: the trained
    expert(s) in the run's dtype (``--quantize_base`` through diffusers' config), UMT5 in the run's dtype, the VAE
    in fp32; 2.1 image-to-video also the CLIP image encoder (fp32) and its processor."""
    return load_pipeline(model, cfg, device)


def plan_wan_components(task: WanTask, cfg: TrainConfig, read, depth: int | None = None) -> Components:
    """What :func:`load_wan_components` loads, on the meta device, ``depth`` blocks deep. A two-expert run plans
    the expert on the device (the idle one waits in CPU memory with --offload_inactive_expert)."""
    from diffusers import AutoencoderKLWan, WanTransformer3DModel
    from transformers import UMT5EncoderModel

    dtype = cfg.weight_dtype
    experts = trained_experts(task, cfg.model, cfg.family_options)
    on_device = experts if not (len(experts) == 2 and cfg.family_options.offload_inactive_expert) else experts[:1]
    transformers_ = {
        e: diffusers_on_meta(
            WanTransformer3DModel, with_depth(read(SUBFOLDER[e], "config.json"), "num_layers", depth), dtype
        )
        for e in on_device
    }
    vae = diffusers_on_meta(AutoencoderKLWan, read("vae", "config.json"), torch.float32)
    text_encoder = transformers_on_meta(read("text_encoder", "config.json"), dtype, UMT5EncoderModel)
    return make_components(
        task, cfg, transformers_, vae, text_encoder, read("scheduler", "scheduler_config.json") or {}, None
    )


def make_components(
    task: WanTask,
    cfg: TrainConfig,
    transformers: dict[str, torch.nn.Module],
    vae,
    text_encoder,
    scheduler_cfg: dict,
    device,
    extra_encoders: dict | None = None,
) -> Components:
    """The loaded (or planned: ``device`` None) modules as the run's components, what the run decided in its
    :class:`~dit_lora.families.wan.state.WanRun`.

    ``transformers``: ``{"high": ...}`` for a single-expert checkpoint, or the trained expert(s) of an A14B.
    """
    info = task.info(cfg.model)
    freeze(transformers.values(), vae, [text_encoder])
    if len(transformers) == 2:
        model = make_peft_capable(
            WanExperts(transformers["high"], transformers["low"], offload=cfg.family_options.offload_inactive_expert)
        )
    else:
        model = next(iter(transformers.values()))
    shift = cfg.family_options.flow_shift or info.flow_shift
    scheduler = training_scheduler({"flow_shift": shift, "num_train_timesteps": info.num_train_timesteps})
    tables = flow_tables(scheduler, device if device is not None else "cpu")
    expert = task.expert(cfg.model, cfg.family_options)
    ranges = {"all": (0, info.num_train_timesteps)}
    if expert:
        boundary = info.expert_boundary(cfg.model.pretrained_model_name_or_path)
        ranges.update(expert_index_ranges(scheduler.timesteps, boundary, info.num_train_timesteps))
    mean, std = clip_statistics(vae)
    state = WanRun(
        scheduler_config=scheduler_cfg,
        flow_shift=shift,
        flow_tables=tables,
        index_ranges=ranges,
        expert=expert,
        trained_experts=["high", "low"] if expert == "both" else [expert or "high"],
        fps=info.fps,
        boundary_ratio=info.boundary_ratio,
        image_probability=task.image_probability(cfg.model, cfg.family_options),
        expand_timesteps=info.expand_timesteps,
        latents_mean=mean,
        latents_std=std,
    )
    return Components(
        model=model,
        scheduler=scheduler,
        encoders={"vae": vae, "text_encoder": text_encoder, **(extra_encoders or {})},
        state=state,
    )


class WanModel(DiffusionModel):
    """``FamilySpec.model``: the checks of :func:`validate_wan_config`, then (the kit's loader, :data:`PARTS`) the trained
    expert(s), UMT5 and the VAE."""

    def __init__(self, info, task: WanTask) -> None:
        super().__init__(info)
        self.task = task

    def validate_config(self, cfg: TrainConfig) -> None:
        """Every check that reads configs only (:func:`validate_wan_config`)."""
        validate_wan_config(self.task, cfg)

    def pipeline_parts(self, cfg: TrainConfig) -> PipelineParts:
        """:data:`PARTS` of the family's task."""
        return PARTS[self.task.task]

    def transformer_folders(self, cfg: TrainConfig) -> dict[str, str]:
        """The trained expert(s): ``--wan_expert high`` never reads ``transformer_2``."""
        return {expert: SUBFOLDER[expert] for expert in trained_experts(self.task, cfg.model, cfg.family_options)}

    def extra_encoders(self, cfg: TrainConfig, common: dict[str, Any]) -> dict[str, Any]:
        """:meth:`image_encoders`."""
        return self.image_encoders(cfg, common)

    def build_components(self, cfg: TrainConfig, loaded: LoadedParts, device: torch.device) -> Components:
        """:func:`make_components` and the tokenizer; A14B's two experts placed by
        :meth:`~dit_lora.families.wan.experts.WanExperts.place` (with offloading, low's weights stay on the CPU)."""
        comps = make_components(
            self.task,
            cfg,
            loaded.transformers,
            loaded.vae,
            loaded.text_encoder,
            loaded.scheduler_config,
            device,
            loaded.extra,
        )
        if isinstance(comps.model, WanExperts):  # both experts (make_components holds them in WanExperts)
            comps.model.place(device)
        comps.encoders["tokenizer"] = loaded.tokenizers["tokenizer"]
        return comps

    def image_encoders(self, cfg: TrainConfig, common: dict) -> dict[str, Any]:
        """Extra encoders to load (2.1 image-to-video: CLIP); none for text-to-video."""
        return {}


class WanPrecision(DiffusionPrecision):
    """``FamilySpec.precision``: transformer and UMT5 in the run's weight dtype; the VAE (and 2.1 I2V's CLIP) fp32."""

    def expected_dtypes(self, comps: Components, weight_dtype: torch.dtype) -> dict[str, torch.dtype]:
        """Transformer and UMT5 in the run's weight dtype; the VAE and a CLIP image encoder in fp32 (diffusers'
        Wan docs)."""
        out = {"model": weight_dtype, "vae": torch.float32, "text_encoder": weight_dtype}
        return {**out, "image_encoder": torch.float32} if "image_encoder" in comps.encoders else out


#: each task's pipeline folder, as the kit's loader reads it (the transformer subfolders: the trained experts,
#: :meth:`WanModel.transformer_folders`; the scheduler config as UniPCMultistepScheduler reads it)
PARTS = {
    task: PipelineParts(
        kind="Wan",
        example_id=example_id,
        folder_listing="transformer/, vae/, text_encoder/, tokenizer/, scheduler/",
        transformer="WanTransformer3DModel",
        vae="AutoencoderKLWan",
        text_encoders=(TextEncoder("UMT5EncoderModel"),),
        scheduler="UniPCMultistepScheduler",
        precision=WanPrecision(),
    )
    for task, example_id in EXAMPLE_IDS.items()
}


def validate_wan_config(task: WanTask, cfg: TrainConfig) -> None:
    """Every check of the ``wan`` and ``wan_i2v`` families that reads configs only (image-to-video then checks
    ``--validation_image``: :class:`~dit_lora.families.wan.i2v.WanI2VModel`)."""
    path = cfg.model.pretrained_model_name_or_path
    assert path is not None  # the parser refuses a run without one (validate_static)
    check_pipeline_folder(
        cfg.model, "Wan", EXAMPLE_IDS[task.task], "transformer/, vae/, text_encoder/, tokenizer/, scheduler/"
    )
    info = task.info(cfg.model)
    weights = ["vae", "text_encoder"] + (["transformer", "transformer_2"] if info.two_experts else ["transformer"])
    check_safetensors(cfg.model, tuple(weights), "Wan")
    check_tokenizer_packages(path, "tokenizer", cfg.model.revision)
    _check_kind(task, cfg, info)
    _check_options(task, cfg, info)
    if cfg.data.max_sequence_length is not None and cfg.data.max_sequence_length != TEXT_LEN:
        raise UserError(
            f"--max_sequence_length {cfg.data.max_sequence_length}: Wan's pipelines pad every prompt to {TEXT_LEN} UMT5 "
            f"tokens and the model was trained on that length (Wan 2.1 I2V even splits its cross-attention input at "
            f"token {TEXT_LEN}). Remove --max_sequence_length or set it to {TEXT_LEN}."
        )
    check_trained_size(task, cfg, info)


def _check_kind(task: WanTask, cfg: TrainConfig, info) -> None:
    path = cfg.model.pretrained_model_name_or_path
    known = (T2V_PIPELINE, I2V_PIPELINE)
    if info.pipeline_class and info.pipeline_class not in known:
        hint = (
            "a Wan variant this recipe does not train (VACE, Animate and video-to-video are not supported)"
            if "Wan" in info.pipeline_class
            else "use the --family of that model"
        )
        raise UserError(
            f"`{path}` is not a Wan text-to-video or image-to-video pipeline: its model_index.json names "
            f"{info.pipeline_class} ({hint}). --family wan and wan_i2v train {', '.join(known)} checkpoints, e.g. "
            f"{EXAMPLE_IDS['t2v']} or {EXAMPLE_IDS['i2v']}."
        )
    tr = read_component_config(cfg.model, "transformer") or read_component_config(cfg.model, "transformer_2")
    if tr is not None and tr.get("_class_name", "WanTransformer3DModel") != "WanTransformer3DModel":
        raise UserError(
            f"`{path}`: transformer/config.json is a {tr.get('_class_name')}, not a WanTransformer3DModel. "
            "Point --pretrained_model_name_or_path at a Wan pipeline."
        )
    if tr is not None and info.kind is None:
        raise UserError(
            f"`{path}`: the transformer's in_channels {info.in_channels} is neither the VAE's {info.z_dim} latent "
            f"channels (text-to-video) nor 2 x {info.z_dim} + 4 (image-to-video: latents, mask, image latents); "
            "--family wan and wan_i2v train neither kind of model (Fun/control variants are not supported)."
        )
    if info.two_experts:
        info.expert_boundary(path)  # refuses two experts without the boundary_ratio that splits their timesteps
    if info.kind and info.kind not in task.kinds:
        other = FAMILY_FOR["i2v" if task.task == "t2v" else "t2v"]
        article = "an" if KIND[info.kind][0] in "aeiou" else "a"
        raise UserError(
            f"`{path}` is {article} {KIND[info.kind]} Wan checkpoint ({info.evidence}), but --family {task.name} "
            f"trains {KIND[task.task]}. Use --family {other}."
        )


def _check_options(task: WanTask, cfg: TrainConfig, info) -> None:
    opts, path = cfg.family_options, cfg.model.pretrained_model_name_or_path
    if opts.wan_expert and not info.two_experts:
        raise UserError(
            f"--wan_expert {opts.wan_expert}: `{path}` has one transformer, not the two experts of Wan 2.2 A14B "
            "(transformer and transformer_2 in model_index.json). Remove --wan_expert."
        )
    if info.two_experts and not TYPES[cfg.lora.lora_type].diffusers_loads:
        raise UserError(
            f"--lora_type {cfg.lora.lora_type}: `{path}` is Wan 2.2 A14B, whose two experts' adapters are diffusers LoRA "
            "files placed by load_lora_weights into transformer and transformer_2 (dit_lora_adapter_files.json); a "
            f"{TYPES[cfg.lora.lora_type].title} adapter is saved in PEFT's format, one per model, which that placement does "
            "not cover. Train A14B with --lora_type lora or dora, or train LoKr/LoHa on Wan 2.1 or Wan 2.2 TI2V-5B."
        )
    if opts.ti2v_image_probability is not None and info.kind != "ti2v":
        raise UserError(
            f"--ti2v_image_probability applies to Wan 2.2 TI2V-5B (expand_timesteps in model_index.json); `{path}` is "
            f"{KIND.get(info.kind or '', 'another kind of')} checkpoint. Remove it."
        )
    if (
        task.expert(cfg.model, cfg.family_options) == "both" and int(os.environ.get("WORLD_SIZE", "1")) > 1
    ):  # WORLD_SIZE: set by accelerate launch
        sharded = decide_engine().name == "fsdp2"
        raise UserError(
            "--wan_expert both alternates the experts step by step, which multi-process training does not support yet "
            + (
                "(under FSDP2 the idle expert's frozen weights, kept in CPU memory between its steps, would be sharded "
                "parameters moved between devices, and each step leaves one expert's LoRA without gradients)"
                if sharded
                else "(each step leaves one expert's LoRA without gradients)"
            )
            + ". Train one expert per run (--wan_expert high, then --wan_expert low), or run on one process."
        )


def check_trained_size(task: WanTask, cfg: TrainConfig, info) -> None:
    """Refuse buckets with over :data:`MAX_TOKEN_RATIO` times the latent tokens per clip of the largest size the
    checkpoint generates at (unless ``--allow_untrained_resolution``): the cost grows with the square of the
    tokens, and the model never saw such lengths."""
    if cfg.family_options.allow_untrained_resolution:
        return
    frames, height, width, why = info.largest_trained_size()
    trained = info.latent_tokens(frames, height, width)
    for bucket in task.video_buckets(cfg):
        tokens = info.latent_tokens(*bucket)
        if tokens > MAX_TOKEN_RATIO * trained:
            f, h, w = bucket
            raise UserError(
                f"{f}x{h}x{w} (frames x height x width) is {tokens:,} latent tokens per clip, over "
                f"{MAX_TOKEN_RATIO:g}x the {trained:,} of {frames}x{height}x{width} ({why}). Use a smaller "
                "--max_num_frames/--height/--width (or --frame_buckets), or add --allow_untrained_resolution."
            )


class WanNotes(VideoNotes):
    """``FamilySpec.notes``: the checkpoint, the training size, the experts and the TI2V image mode."""

    task: WanTask

    def start_notes(self, cfg: TrainConfig) -> list[str]:
        """What the run trains (model, size, fps), which expert(s) and how, and the TI2V image-mode share."""
        info = self.task.info(cfg.model)
        f, h, w = self.task.video_buckets(cfg)[0]
        also = automatic_note(self.task.video_buckets(cfg), automatic=not cfg.video.frame_buckets)
        notes = [
            f"model: {info.describe()}; training size {f}x{h}x{w} (frames x height x width) at {info.fps} fps" + also
        ]
        expert = self.task.expert(cfg.model, cfg.family_options)
        if expert:
            what = {
                "high": "the high-noise expert (transformer) only",
                "low": "the low-noise expert (transformer_2) only",
                "both": "both experts, alternating steps (odd: high noise, even: low noise)",
            }[expert]
            notes.append(
                f"two-expert checkpoint (boundary_ratio {info.boundary_ratio:g}): training {what}; each "
                "expert's steps draw only its own timesteps"
            )
            if expert != "both" and cfg.validation.validation_prompt:
                notes.append(
                    "validation videos during training run the trained expert for every denoising step "
                    "(the other expert is not loaded); the final samples use both, with the adapter"
                )
        if info.kind == "ti2v":
            notes.append(
                f"TI2V-5B: {self.task.image_probability(cfg.model, cfg.family_options):.0%} of samples in image-to-video mode"
            )
        return notes


#: ``FamilySpec.defaults``: one clip per step, as every published Wan LoRA recipe (musubi-tuner, DiffSynth-Studio,
#: SimpleTuner)
DEFAULTS = OneClipPerStep("video: one clip per step, as the published Wan LoRA trainers")


# ---- demo ------------------------------------------------------------------------------------
def prepare_wan_demo(task: WanTask, cfg: TrainConfig) -> None:
    """Build the tiny offline pipeline (``--demo_wan_variant``) and moving-square clips at its geometry."""
    variant = cfg.family_options.demo_wan_variant
    build_demo_model(
        lambda: build_tiny_wan_pipeline(cfg.model.pretrained_model_name_or_path or "", variant=variant, seed=0)
    )
    demo_clips(cfg, task, TINY_WAN_GEOMETRY["height"], fps=24 if "ti2v" in variant else 16)


class WanDemo:
    """``FamilySpec.demo``: the tiny offline Wan pipeline of ``--demo_wan_variant`` and moving-square clips."""

    def __init__(self, task: WanTask) -> None:
        self.task = task

    def prepare_demo(self, cfg: TrainConfig) -> None:
        """:func:`prepare_wan_demo`, then the configs read before it forgotten (the folder is new)."""
        prepare_wan_demo(self.task, cfg)
        forget_infos()
