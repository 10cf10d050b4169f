"""LTX-2 in-context LoRA (IC-LoRA, ``--family ltx2_ic``, ``LTX2InContextPipeline``): each clip trained with its reference
clip (a depth, pose or edge video, ...) beside it, as diffusers' ``pipeline_ltx2_ic_lora.py`` generates and Lightricks'
LTX-2 trainer (``video_to_video`` strategy) trains.

What differs from text-to-video (diffusers 0.42.1; Lightricks' ``video_to_video.py``): the reference clip is decoded
frame for frame with its clip at the clip's size divided by ``--reference_downscale_factor``, encoded by the video VAE
(normalised as the clip's latents) and cached beside them; in the step its tokens are appended after the clip's, clean,
at timestep 0 (the pipeline's ``t * (1 - conditioning_mask)`` with the reference's strength 1), at their own positions
(``rope.prepare_video_coords`` of the reference's latent size at the clip's frame rate, height and width scaled by the
factor into the clip's space), and left out of the loss. The video self-attention is not masked (the pipeline's
``conditioning_attention_strength`` 1). The sound trains as text-to-video's does. The factor is written into the
adapter's safetensors metadata (``reference_downscale_factor``, as Lightricks' trainer writes it).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, cast

import torch

from dit_lora.config import TrainConfig
from dit_lora.contract.family import Components
from dit_lora.core.errors import UserError
from dit_lora.data.video import decode_clip
from dit_lora.data.video_prepare import frame_start
from dit_lora.families.diffusion.reference_clips import (
    ReferenceFlags,
    ReferenceMedia,
    reference_pixels,
    reference_size,
)
from dit_lora.families.diffusion.video_sizes import ClipData
from dit_lora.families.ltx2.encoders import LTX2Encoders, LTX2Setup
from dit_lora.families.ltx2.info import LTX2Task
from dit_lora.families.ltx2.loss import LTX2Loss, pack_video
from dit_lora.families.ltx2.plan import LTX2Plan
from dit_lora.families.ltx2.state import run_state
from dit_lora.output.comfyui_types import RenamedExport

#: the pipeline class of in-context generation
IC_PIPELINE = "LTX2InContextPipeline"
#: the cache key of each clip's reference latents ``(C, F', h / factor, w / factor)``
REFERENCE = "reference_latents"
#: the option names the kit's reference data reads
FLAGS = ReferenceFlags("reference_column", "reference_dir", "reference_downscale_factor", "LTX-2 IC-LoRA")
#: the adapter metadata key (Lightricks' trainer's; what IC-LoRA loaders read)
FACTOR_KEY = "reference_downscale_factor"


class LTX2ICData(ClipData):
    """``FamilySpec.data``: every clip with its reference clip (the kit's :class:`ReferenceMedia`)."""

    def data_handler(self, cfg: TrainConfig, spec):
        """The reference clip handler over the run's cache folder."""
        from dit_lora.data.prepare import cache_root_for

        return ReferenceMedia(cfg, spec, cache_root_for(cfg.data), flags=FLAGS)


class LTX2ICEncoders(LTX2Encoders):
    """``FamilySpec.encoders``: text-to-video's, plus each clip's reference latents."""

    def cache_identity(self, cfg: TrainConfig, comps: Components | None = None) -> dict[str, Any]:
        """Text-to-video's, plus the reference's downscale factor."""
        factor = cfg.family_options.reference_downscale_factor
        return {**super().cache_identity(cfg, comps), "reference_downscale_factor": factor}

    def encode_samples(self, comps: Components, samples: list) -> dict[str, torch.Tensor]:
        """Text-to-video's entries, and :data:`REFERENCE`: each clip's reference through the video VAE."""
        out = super().encode_samples(comps, samples)
        state = run_state(comps)
        pixels = torch.stack([reference_pixels(s, state.reference_factor, state.frame_start) for s in samples])
        out[REFERENCE] = self.encode_images(comps, pixels)["latents"]
        return out


def reference_coords(model, reference: torch.Tensor, factor: int, fps: float) -> torch.Tensor:
    """The reference tokens' positions ``(B, 3, n, 2)``: ``rope.prepare_video_coords`` of the reference's latent size,
    height and width scaled by ``factor`` into its clip's space (``LTX2InContextPipeline._encode_reference_conditions``)."""
    bsz, _, frames, height, width = reference.shape
    coords = model.rope.prepare_video_coords(bsz, frames, height, width, reference.device, fps=fps)
    if factor != 1:
        coords[:, 1:3] = coords[:, 1:3] * factor
    return coords


class LTX2ICLoss(LTX2Loss):
    """``FamilySpec.loss``: text-to-video's, the clip's reference tokens appended clean at timestep 0 with their own
    positions, out of the loss (module docstring)."""

    def in_context(
        self, comps: Components, batch: dict[str, Any], noisy: torch.Tensor, timestep: torch.Tensor, fps: float
    ) -> tuple[torch.Tensor, torch.Tensor, dict[str, Any]]:
        """The clip's tokens then its reference's; their timesteps (the reference's 0); both tokens' positions."""
        model: Any = comps.model  # the transformer (its rope makes the positions)
        state = run_state(comps)
        latents, reference = batch["latents"], batch[REFERENCE].to(noisy.dtype)
        bsz, _, frames, height, width = latents.shape
        coords = model.rope.prepare_video_coords(bsz, frames, height, width, noisy.device, fps=fps)
        tokens = pack_video(reference)
        per_token = timestep[:, None].expand(bsz, noisy.shape[1]) if timestep.ndim == 1 else timestep
        timesteps = torch.cat([per_token, per_token.new_zeros(bsz, tokens.shape[1])], dim=1)
        context = {
            "video_coords": torch.cat([coords, reference_coords(model, reference, state.reference_factor, fps)], 2)
        }
        return torch.cat([noisy, tokens], dim=1), timesteps, context


class LTX2ICPlan(LTX2Plan):
    """``FamilySpec.plan``: text-to-video's, each clip with a reference latent of its bucket / the factor."""

    def plan_conditioning(self, comps: Components, cfg: TrainConfig, batch_size: int) -> dict[str, Any]:
        """Text-to-video's conditioning and the worst bucket's reference latents."""
        out = super().plan_conditioning(comps, cfg, batch_size)
        info = cast(LTX2Task, self.task).info(cfg)
        factor = cfg.family_options.reference_downscale_factor
        frames, height, width = max(self.task.video_buckets(cfg), key=lambda b: b[0] * b[1] * b[2])
        latent = ((frames - 1) // info.vae_temporal + 1, height // factor // info.vae_spatial)
        out[REFERENCE] = torch.empty(batch_size, info.z_dim, latent[0], latent[1], width // factor // info.vae_spatial)
        return out


def load_reference_frames(cfg: TrainConfig, task, samples: list | None) -> list:
    """The validation clips' reference as PIL frames at the first bucket / the factor: ``--validation_reference``,
    else the first training clip's reference (one paragraph when it cannot give the frames)."""
    from PIL import Image

    factor = cfg.family_options.reference_downscale_factor
    frames, height, width = reference_size(task.video_buckets(cfg)[0], factor)
    path = cfg.family_options.validation_reference or (samples[0].conditions[0] if samples else None)
    if path is None:
        raise UserError("LTX-2 IC-LoRA validation needs a reference clip: set --validation_reference.")
    try:
        pixels = decode_clip(path, frames, height, width, start=frame_start(cfg))
    except ValueError as err:  # VideoDecodeError: unreadable or too short
        raise UserError(
            f"The validation reference clip `{path}` cannot give {frames} frames ({err}). Give --validation_reference "
            "a clip at least as long as the validation clips."
        ) from None
    array = ((pixels.permute(0, 2, 3, 1) + 1.0) * 127.5).round().clamp(0, 255).to(torch.uint8).numpy()
    return [Image.fromarray(frame) for frame in array]


class LTX2ICSetup(LTX2Setup):
    """``FamilySpec.setup``: text-to-video's, the reference's factor and frame sampling recorded, the validation
    reference kept."""

    def configure(self, comps: Components, cfg: TrainConfig) -> None:
        """The text settings, the downscale factor and how frames are taken (the references follow)."""
        super().configure(comps, cfg)
        state = run_state(comps)
        state.reference_factor = int(cfg.family_options.reference_downscale_factor)
        state.frame_start = frame_start(cfg)

    def inspect_samples(self, comps: Components, cfg: TrainConfig, samples: list) -> None:
        """Keep the validation clips' reference (``--validation_reference``, else the first clip's)."""
        if cfg.validation.validation_prompt:
            run_state(comps).validation_reference = load_reference_frames(cfg, self.task, samples)


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


def stamp_factor(path: Path, factor: int) -> None:
    """Add ``reference_downscale_factor`` to the safetensors metadata of the adapter file at ``path``."""
    from safetensors import safe_open
    from safetensors.torch import load_file, save_file

    with safe_open(str(path), framework="pt") as handle:
        metadata = dict(handle.metadata() or {})
    metadata[FACTOR_KEY] = json.dumps(factor)
    save_file(load_file(str(path)), str(path), metadata=metadata)


def stamped_factor(path: Path) -> int | None:
    """The ``reference_downscale_factor`` in the metadata of the safetensors file at ``path`` (None: none)."""
    from safetensors import safe_open

    if not path.is_file():
        return None
    with safe_open(str(path), framework="pt") as handle:
        value = (handle.metadata() or {}).get(FACTOR_KEY)
    return int(json.loads(value)) if value is not None else None


class ICExports:
    """``FamilySpec.exports`` and ``adapter_extras`` of IC-LoRA: LTX-2's ComfyUI file, with the downscale factor in
    its metadata and in the adapter's (where ComfyUI's IC-LoRA nodes and Lightricks' pipelines read it)."""

    def __init__(self, exports: RenamedExport, weight_name: str) -> None:
        self.exports, self.weight_name = exports, weight_name

    def export_formats(self) -> dict[str, str]:
        """LTX-2's."""
        return self.exports.export_formats()

    def export_types(self, fmt: str) -> tuple[str, ...]:
        """LTX-2's."""
        return self.exports.export_types(fmt)

    def export_adapter(self, output_dir: Path, fmt: str) -> list[Path]:
        """LTX-2's export, the run's factor (read from its adapter) stamped into what it writes."""
        written = self.exports.export_adapter(output_dir, fmt)
        factor = stamped_factor(Path(output_dir) / self.weight_name)
        if factor is not None:
            for path in written:
                stamp_factor(path, factor)
        return written

    def save_adapter_extras(self, output_dir: Path, comps, cfg: TrainConfig) -> None:
        """LTX-2's ComfyUI file, then ``reference_downscale_factor`` in every safetensors file the run wrote."""
        self.exports.save_adapter_extras(output_dir, comps, cfg)
        factor = int(cfg.family_options.reference_downscale_factor)
        for path in sorted(Path(output_dir).glob("*.safetensors")):
            stamp_factor(path, factor)
