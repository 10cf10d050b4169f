"""Wan's checks before any weight loads: the folder, the checkpoint kind against ``--family``, the experts and
TI2V options against the checkpoint, the prompt length and the video size. Each refusal is one paragraph."""

from __future__ import annotations

import os

from dit_lora.config import TrainConfig
from dit_lora.config.adapter_types import TYPES
from dit_lora.core.engine import decide_engine
from dit_lora.core.errors import UserError
from dit_lora.families.wan.info import (
    EXAMPLE_IDS,
    FAMILY_FOR,
    I2V_PIPELINE,
    KIND,
    MAX_TOKEN_RATIO,
    T2V_PIPELINE,
    TEXT_LEN,
)
from dit_lora.families.wan.task import WanTask
from dit_lora.modelfiles.pipeline_files import (
    check_pipeline_folder,
    check_safetensors,
    read_component_config,
)
from dit_lora.setup.tokenizer_check import check_tokenizer_packages


def validate_wan_config(task: WanTask, cfg: TrainConfig) -> None:
    """Every check of the ``wan`` and ``wan_i2v`` families that reads configs only (image-to-video then checks
    ``--validation_image``: :class:`~dit_lora.families.wan.i2v.WanI2VModel`)."""
    path = cfg.model.pretrained_model_name_or_path
    assert path is not None  # the parser refuses a run without one (validate_static)
    check_pipeline_folder(
        cfg.model, "Wan", EXAMPLE_IDS[task.task], "transformer/, vae/, text_encoder/, tokenizer/, scheduler/"
    )
    info = task.info(cfg)
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
    assert path is not None  # the parser refuses a run without one (validate_static)
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
        task.expert(cfg) == "both" and int(os.environ.get("WORLD_SIZE", "1")) > 1
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
