"""HunyuanVideo 1.5's model component and what is read from its configs before anything loads: the checks, loading
(the transformer, Qwen2.5-VL and ByT5 in the run's dtype, the VAE in fp32; image-to-video: SigLIP and its
processor), the precision policy, the start notes, the defaults and ``--demo``."""

from __future__ import annotations

import types
from typing import Any

import torch

from dit_lora.config import TrainConfig
from dit_lora.config.schema import LoraOptions
from dit_lora.contract.family import Components
from dit_lora.core.errors import UserError
from dit_lora.families.hunyuanvideo15 import demo as tiny
from dit_lora.families.hunyuanvideo15.info import EXAMPLE_ID, HunyuanVideo15Task, forget_infos
from dit_lora.families.hunyuanvideo15.state import HunyuanVideo15Run
from dit_lora.kit.components import Fp32VaePrecision
from dit_lora.kit.conditioning import check_validation_image
from dit_lora.kit.demo_data import build_demo_model, demo_clips
from dit_lora.kit.info_cache import VideoNotes
from dit_lora.kit.loader import DiffusionModel, LoadedParts, PipelineParts, TextEncoder, image_encoder_parts
from dit_lora.kit.video_sizes import OneClipPerStep
from dit_lora.modeling.flow_matching import flow_tables, training_scheduler


def training_shift(cfg: TrainConfig, scheduler_cfg: dict) -> float:
    """``--flow_shift``, else the checkpoint scheduler's shift (5 at 480p)."""
    return float(cfg.family_options.flow_shift or scheduler_cfg.get("shift") or 5.0)


def make_components(cfg: TrainConfig, loaded: LoadedParts, device) -> Components:
    """The loaded (or planned: ``device`` None) modules as the run's components, with the training tables and the
    VAE's scaling factor in the run's :class:`HunyuanVideo15Run`."""
    scheduler_cfg = dict(loaded.scheduler_config)
    shift = training_shift(cfg, scheduler_cfg)
    scheduler = training_scheduler(
        {"shift": shift, "num_train_timesteps": scheduler_cfg.get("num_train_timesteps", 1000)}
    )
    sync_free(loaded.transformer)
    tiled(loaded.vae)
    state = HunyuanVideo15Run(
        scheduler_config=scheduler_cfg,
        flow_tables=flow_tables(scheduler, device if device is not None else "cpu"),
        flow_shift=shift,
        scaling_factor=float(loaded.vae.config.scaling_factor),
    )
    return loaded.components(scheduler, state)


def tiled(vae: Any) -> None:
    """The VAE in 256 px tiles, one clip at a time (diffusers' switches; the pipelines' docs tile it too): its
    mid-block attention spans every latent of a clip with a dense causal mask, 160 GiB at 121 x 480 x 848 in one piece,
    and its mask takes a batch of one. Clips up to 256 px a side encode whole, as without tiling."""
    vae.enable_tiling()
    vae.enable_slicing()


def sync_free(transformer: Any) -> None:
    """Give ``transformer`` (the trained one, and the plan's on the meta device) :func:`sync_free_forward`."""
    transformer.forward = types.MethodType(sync_free_forward, transformer)


def sync_free_forward(
    self: Any,
    hidden_states: torch.Tensor,
    timestep: torch.Tensor,
    encoder_hidden_states: torch.Tensor,
    encoder_attention_mask: torch.Tensor,
    timestep_r: torch.Tensor | None = None,
    encoder_hidden_states_2: torch.Tensor | None = None,
    encoder_attention_mask_2: Any = None,
    image_embeds: Any = None,
    attention_kwargs: dict | None = None,
    return_dict: bool = True,
) -> tuple[torch.Tensor]:
    """``HunyuanVideo15Transformer3DModel.forward`` (diffusers 0.42.1) without its host syncs, for training and the
    plan (the reloaded pipeline keeps diffusers' own): diffusers branches on ``torch.all(image_embeds == 0)`` in Python
    and moves each sample's valid context tokens first by boolean indexing, two reads of the device every step (and
    data-dependent shapes a memory plan cannot trace). Here the image tokens are switched off by a tensor (zeros:
    text-to-video) and the context keeps its order, padding zeroed and masked. Its tokens carry no position (RoPE
    rotates the video stream only) and every block treats them token by token or through the masked attention, so
    the order changes no valid token's output; tested against diffusers' forward."""
    batch, _, frames, height, width = hidden_states.shape
    p_t, p_h = self.config.patch_size_t, self.config.patch_size
    rotary = self.rope(hidden_states)
    temb = self.time_embed(timestep, timestep_r=timestep_r)
    hidden_states = self.x_embedder(hidden_states)
    text = self.context_embedder(encoder_hidden_states, timestep, encoder_attention_mask)
    text = text + self.cond_type_embed(torch.zeros_like(text[:, :, 0], dtype=torch.long))
    glyph = self.context_embedder_2(encoder_hidden_states_2)
    glyph = glyph + self.cond_type_embed(torch.ones_like(glyph[:, :, 0], dtype=torch.long))
    image_on = (image_embeds != 0).any()  # diffusers: text-to-video when every image embedding is zero
    image = self.image_embedder(image_embeds) * image_on.to(text.dtype)
    image = image + self.cond_type_embed(2 * torch.ones_like(image[:, :, 0], dtype=torch.long))
    text_mask, glyph_mask = encoder_attention_mask.bool(), encoder_attention_mask_2.bool()
    context = torch.cat([image, glyph * glyph_mask[..., None], text * text_mask[..., None]], dim=1)
    mask = torch.cat([image_on.expand(batch, image.shape[1]), glyph_mask, text_mask], dim=1)
    checkpointing = torch.is_grad_enabled() and self.gradient_checkpointing
    for block in self.transformer_blocks:
        args = (hidden_states, context, temb, mask, rotary)
        hidden_states, context = self._gradient_checkpointing_func(block, *args) if checkpointing else block(*args)
    hidden_states = self.proj_out(self.norm_out(hidden_states, temb))
    hidden_states = hidden_states.reshape(batch, frames // p_t, height // p_h, width // p_h, -1, p_t, p_h, p_h)
    hidden_states = hidden_states.permute(0, 4, 1, 5, 2, 6, 3, 7).flatten(6, 7).flatten(4, 5).flatten(2, 3)
    return (hidden_states,)


class HunyuanVideo15Model(DiffusionModel):
    """``FamilySpec.model``: the folder's checks, then (the kit's loader, :data:`PARTS`) the transformer and both text
    encoders in the run's dtype, the VAE in fp32, the tokenizers; image-to-video also SigLIP (fp32) and its
    processor."""

    def __init__(self, info, task: HunyuanVideo15Task) -> None:
        super().__init__(info, PARTS)
        self.task = task

    def validate_config(self, cfg: TrainConfig) -> None:
        """A diffusers HunyuanVideo 1.5 folder of safetensors, sizes the model takes; a step-distilled (meanflow)
        checkpoint refused; image-to-video: a SigLIP encoder and a ``--validation_image`` that exists."""
        self.check_folder(cfg)
        info = self.task.info(cfg.model)
        if info.meanflow:
            raise UserError(
                f"`{cfg.model.pretrained_model_name_or_path}` is a step-distilled HunyuanVideo 1.5 checkpoint "
                "(use_meanflow: its transformer takes a second timestep, trained with its own objective); dit-lora "
                f"trains the undistilled ones. Use {EXAMPLE_ID} or another undistilled checkpoint."
            )
        self.task.video_buckets(cfg)  # the frame and size rules, before anything loads
        if self.task.task == "i2v":
            check_validation_image(cfg, "condition validation videos on the first training clip's first frame")

    def extra_encoders(self, cfg: TrainConfig, common: dict[str, Any]) -> dict[str, Any]:
        """Image-to-video: SigLIP (fp32) and its processor, as the pipeline loads them; nothing for text-to-video."""
        if self.task.task != "i2v":
            return {}
        return image_encoder_parts(cfg, common, "SiglipVisionModel", "SiglipImageProcessor", "feature_extractor")

    def lora_targets(self, model: torch.nn.Module, lora: LoraOptions) -> list[str]:
        """``--lora_layers``, else the dual-stream blocks' attention projections (``info.default_lora_layers``), each
        block named (the bare names would also take the caption refiner's attention), without the last block's
        ``to_add_out``: the caption stream's output of the last block is never read, so it would get no gradient."""
        if lora.lora_layers:
            return list(lora.lora_layers)
        blocks = len(getattr(model, "transformer_blocks", ()))
        names = self.info.default_lora_layers
        return [
            f"transformer_blocks.{i}.attn.{name}"
            for i in range(blocks)
            for name in names
            if not (name == "to_add_out" and i == blocks - 1)
        ]

    def build_components(self, cfg: TrainConfig, loaded: LoadedParts, device: torch.device) -> Components:
        """:func:`make_components`."""
        return make_components(cfg, loaded, device)


#: HunyuanVideo 1.5's pipeline folder, as the kit's loader reads it; its precision (``FamilySpec.precision`` too):
#: the transformer and both text encoders in the run's weight dtype, the VAE in fp32 (its latents are cached once)
PARTS = PipelineParts(
    kind="HunyuanVideo 1.5",
    example_id=EXAMPLE_ID,
    transformer="HunyuanVideo15Transformer3DModel",
    vae="AutoencoderKLHunyuanVideo15",
    text_encoders=(
        TextEncoder("Qwen2_5_VLTextModel", tokenizer_cls="Qwen2Tokenizer"),
        TextEncoder(
            "T5EncoderModel", subfolder="text_encoder_2", tokenizer="tokenizer_2", tokenizer_cls="ByT5Tokenizer"
        ),
    ),
    precision=Fp32VaePrecision(),
)


class HunyuanVideo15Notes(VideoNotes):
    """``FamilySpec.notes``: the checkpoint, the training size and fps, the shift trained with."""

    def start_notes(self, cfg: TrainConfig) -> list[str]:
        """What the run trains (the kit's line: model, task, size, fps) and the training shift."""
        shift = cfg.family_options.flow_shift
        return [
            self.trained_note(cfg),
            f"training shift {shift if shift else self.task.info(cfg.model).scheduler_shift:g} "
            + ("(--flow_shift)" if shift else "(the checkpoint scheduler's; --flow_shift sets another)"),
        ]


#: ``FamilySpec.defaults``: one clip per step, as musubi-tuner's and diffusion-pipe's HunyuanVideo 1.5 examples
DEFAULTS = OneClipPerStep("video: one clip per step, as musubi-tuner's HunyuanVideo 1.5 examples")


class HunyuanVideo15Demo:
    """``FamilySpec.demo``: the tiny offline HunyuanVideo 1.5 pipeline of the task (:mod:`.demo`) and moving-square
    clips."""

    def __init__(self, task: HunyuanVideo15Task) -> None:
        self.task = task

    def prepare_demo(self, cfg: TrainConfig) -> None:
        """Build the tiny model named in ``cfg`` and, into ``--train_data_dir``, clips at its geometry."""
        build_demo_model(
            lambda: tiny.build_tiny_hunyuanvideo15_pipeline(
                cfg.model.pretrained_model_name_or_path or "", task=self.task.task, seed=0
            )
        )
        forget_infos()  # the folder is new
        demo_clips(cfg, self.task, tiny.TINY_GEOMETRY["height"], fps=24)
