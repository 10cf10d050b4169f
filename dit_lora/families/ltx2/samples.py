"""LTX-2's validation clips, with their sound: from the in-memory model (the cached caption embeddings through a
stand-in for the text connectors, the VAEs moved in to decode, the checkpoint's vocoder) or the reloaded
``LTX2Pipeline``, each written as an mp4 whose audio stream is the vocoder's waveform."""

from __future__ import annotations

from contextlib import ExitStack
from pathlib import Path
from typing import Any

import torch

from dit_lora.config import TrainConfig
from dit_lora.config.schema import ModelOptions
from dit_lora.contract.family import Components
from dit_lora.families.ltx2.encoders import load_reference_frames, max_sequence_length
from dit_lora.families.ltx2.state import run_state
from dit_lora.kit.components import DiffusionSamples, module_on, vae_on
from dit_lora.kit.conditioning import kept_conditioning_image
from dit_lora.kit.loader import model_class
from dit_lora.kit.video_samples import VideoSamples
from dit_lora.modelfiles.pipeline_files import read_component_config
from dit_lora.output.video import write_video


class CachedConnectors(torch.nn.Module):
    """The text connectors' place in the in-memory pipeline: the cached video and audio caption embeddings come
    joined on their last axis (``video_width`` first) and are handed back apart, with their mask."""

    anchor: torch.Tensor

    def __init__(self, video_width: int, device: torch.device | str = "cpu") -> None:
        super().__init__()
        self.video_width = video_width
        # where the pipeline finds the module (its device and dtype properties read a diffusers model's; no weights)
        self.register_buffer("anchor", torch.zeros((), device=device), persistent=False)

    @property
    def device(self) -> torch.device:
        """Where the pipeline runs it."""
        return self.anchor.device

    @property
    def dtype(self) -> torch.dtype:
        """fp32: the embeddings pass through unchanged."""
        return self.anchor.dtype

    def forward(self, joined: torch.Tensor, mask: torch.Tensor, padding_side: str = "left", scale_factor: int = 8):
        """``(video, audio, mask)`` as ``LTX2TextConnectors`` returns them."""
        return joined[..., : self.video_width], joined[..., self.video_width :], mask


def load_vocoder(model: ModelOptions, device: torch.device) -> Any:
    """The checkpoint's vocoder (the class its ``model_index.json`` names, ``LTX2Vocoder`` when unreadable), fp32
    (``model``: the run's ``cfg.model``)."""
    from diffusers.pipelines.ltx2 import vocoder as vocoders  # heavy: only when a sample is made

    index = read_component_config(model, "", "model_index.json") or {}
    name = (index.get("vocoder") or [None, "LTX2Vocoder"])[1]
    cls = getattr(vocoders, name, vocoders.LTX2Vocoder)
    path = model.pretrained_model_name_or_path
    return cls.from_pretrained(path, subfolder="vocoder", revision=model.revision, use_safetensors=True).to(device)


def reference_call_kwargs(cfg: TrainConfig, task, state) -> dict[str, Any]:
    """``LTX2InContextPipeline``'s reference arguments: the kept validation reference (loaded now when there is none,
    as for a card written without a run) at strength 1, and the downscale factor."""
    from diffusers.pipelines.ltx2.pipeline_ltx2_ic_lora import LTX2ReferenceCondition

    frames = state.validation_reference if state is not None else None
    if frames is None:
        frames = load_reference_frames(cfg, task, None)
    return {
        "reference_conditions": [LTX2ReferenceCondition(frames=frames, strength=1.0)],
        "reference_downscale_factor": int(cfg.family_options.reference_downscale_factor),
    }


class LTX2Samples(VideoSamples, DiffusionSamples):
    """``FamilySpec.samples``: clips from ``LTX2Pipeline`` at the run's first bucket and the model's frame rate, each
    ``(frames, (waveform, rate))``, written as mp4 with sound."""

    fixed_kwargs = {"output_type": "pil"}

    def call_kwargs(self, cfg: TrainConfig, generator, num_videos: int, comps: Components | None = None):
        """The kit's, with the frame rate the clip is generated and written at and, image-to-video, the run's
        conditioning image (the first clip's first frame or ``--validation_image``); in-context, its reference."""
        out = {**super().call_kwargs(cfg, generator, num_videos, comps), "frame_rate": float(self.fps(cfg))}
        state = run_state(comps) if comps is not None else None
        if self.task.task == "i2v":
            out["image"] = kept_conditioning_image(self.task, cfg, state)
        if self.task.task == "ic":
            out.update(reference_call_kwargs(cfg, self.task, state))
        return out

    def generate(
        self, comps: Components, model: torch.nn.Module, cond: dict[str, Any], cfg: TrainConfig, seed: int
    ) -> list:
        """``--num_validation_images`` clips from the in-memory model and the cached caption embeddings."""
        # the first trained parameter's (a swapped block's frozen weights may wait in host memory), else the first's
        device = next((p for p in model.parameters() if p.requires_grad), next(model.parameters())).device
        n = cfg.validation.num_validation_images
        with ExitStack() as stack:
            pipe = model_class(
                "diffusers", self.task.pipeline_class_name
            )(  # Any: diffusers' top-level names read as dummies
                scheduler=self.sampler(comps),
                vae=stack.enter_context(vae_on(comps, device)),
                audio_vae=stack.enter_context(module_on(comps.encoders["audio_vae"], device)),
                text_encoder=None,
                tokenizer=None,
                connectors=CachedConnectors(cond["prompt_embeds"].shape[-1], device),
                transformer=model,
                vocoder=load_vocoder(cfg.model, device),
            )
            pipe.set_progress_bar_config(disable=True)
            embeds = {}
            for prefix in ("", "negative_"):
                joined = torch.cat([cond[f"{prefix}prompt_embeds"], cond[f"{prefix}audio_prompt_embeds"]], dim=-1)
                embeds[f"{prefix}prompt_embeds"] = joined.to(device, next(model.parameters()).dtype).repeat(n, 1, 1)
                embeds[f"{prefix}prompt_attention_mask"] = (
                    cond[f"{prefix}prompt_attention_mask"].to(device).repeat(n, 1)
                )
            generator = torch.Generator(device=device).manual_seed(seed)
            with torch.no_grad():
                out = pipe(**embeds, **self.call_kwargs(cfg, generator, n, comps))
            rate = int(pipe.vocoder.config.output_sampling_rate)
        return [(frames, (audio.float().cpu(), rate)) for frames, audio in zip(out.frames, out.audio)]

    def generate_with_pipeline(
        self, pipe, prompt: str, cfg: TrainConfig, seed: int, num_images: int, comps=None
    ) -> list:
        """``num_images`` clips of ``prompt`` from the reloaded pipeline, at the run's caption length."""
        generator = torch.Generator(device=self.pipeline_device(pipe)).manual_seed(seed)
        with torch.no_grad():
            out = pipe(
                prompt=[prompt] * num_images,
                max_sequence_length=max_sequence_length(cfg.data),
                **self.call_kwargs(cfg, generator, num_images, comps),
            )
        rate = int(pipe.vocoder.config.output_sampling_rate)
        return [(frames, (audio.float().cpu(), rate)) for frames, audio in zip(out.frames, out.audio)]

    def save_sample(self, sample: Any, stem: Path, cfg: TrainConfig) -> Path:
        """A validation clip as ``stem.mp4`` at the model's frame rate, its sound as the audio stream."""
        frames, audio = sample
        return write_video(frames, Path(stem).with_suffix(".mp4"), fps=self.fps(cfg), audio=audio)
