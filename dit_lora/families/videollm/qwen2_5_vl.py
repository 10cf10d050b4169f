"""Qwen2.5-VL (``Qwen2_5_VLForConditionalGeneration``) as a :class:`~dit_lora.families.videollm.architecture.VideoLLMSpec`.

Module layout in transformers 5.x::

    model.visual                  Qwen2_5_VisionTransformerPretrainedModel (vision tower)
      .patch_embed.proj           Conv3d, kernel = stride = (temporal_patch, patch, patch), no bias
      .blocks.N.attn.{qkv,proj}   window / full attention (``fullatt_block_indexes``)
      .blocks.N.mlp.{gate,up,down}_proj   <- same names as the language model's MLP
      .merger                     Qwen2_5_VLPatchMerger: 2 x 2 patches -> one LLM token (the projector)
    model.language_model          Qwen2_5_VLTextModel (LoRA goes here only)
    lm_head

Video preprocessing is our own (transformers' Qwen2-VL video processor needs torchvision); it
reproduces what ``Qwen2VLVideoProcessor`` feeds the model:

1. Resize every frame to (h, w), both multiples of ``patch_size * merge_size`` (28), with the
   aspect ratio kept and ``min_pixels <= h * w <= max_pixels`` (:func:`smart_resize`, the rule of
   the transformers processor; per frame only: the optional total-video pixel cap
   ``cap_pixels_per_frame`` of newer processors is not applied).  Bicubic, antialiased, rounded
   to the uint8 grid like the processor's uint8 frames.
2. Rescale by 1/255 and normalise with ``image_mean``/``image_std`` (OpenAI CLIP's).
3. Pad the clip to a multiple of ``temporal_patch_size`` (2) frames by repeating the last frame.
4. Flatten to ``pixel_values_videos`` of shape (t * gh * gw, C * tp * p * p) with
   ``video_grid_thw`` = (t, gh, gw) = (F / tp, h / p, w / p).  Row order: temporal patch, then
   2 x 2 merge blocks in raster order, then the 4 patches inside a block in raster order (the
   merger concatenates 4 consecutive rows, and the vision RoPE's ``get_vision_position_ids`` lays
   (h, w) out block-major the same way).  Column order: channel, frame in the temporal patch,
   patch row, patch column (``patch_embed`` views each row as (C, tp, p, p) for its Conv3d).
   ``tests/vlm/test_qwen2_5_vl.py`` checks this against the model's own Conv3d over the whole clip and
   against transformers' (torchvision-free) PIL image processor.

The LLM gets ``t * gh * gw / merge_size**2`` video tokens (:meth:`Qwen25VLSpec.video_token_count`).

M-RoPE: Qwen2.5-VL gives video tokens 3-D (time, height, width) rotary positions, but transformers
computes them only when ``mm_token_type_ids`` (0 text, 1 image, 2 video per token; its processor
returns them) is passed with the grids; without them every token silently gets 1-D text positions,
which is not how the checkpoints were trained.  The spec's generic batches (``pad_batch`` +
:meth:`~Qwen25VLSpec.collate_pixels`) cannot carry them (they depend on ``input_ids``), so
:meth:`Qwen25VLSpec.load_model` installs :meth:`~Qwen25VLSpec.prepare_model`: a forward pre-hook on
``model.model`` that derives ``mm_token_type_ids`` from ``input_ids`` when a call with video or
image grids lacks them (training forward, ``model.model(...)`` for hidden states), and the same
for ``generate``'s first position-id computation.  :meth:`~Qwen25VLSpec.text_inputs` returns them
for callers that prefer to pass them explicitly (the result is identical).

``second_per_grid_ts`` (seconds per temporal patch, for the time axis of M-RoPE) is
``temporal_patch_size / fps`` per video, ``fps`` being the frame rate the frames were sampled at:
``frame_inputs(..., fps=...)``, else ``prep["fps"]`` (2.0 by default, qwen-vl-utils' sampling
rate, which makes it 1.0: the model's own default when the value is missing).
"""

from __future__ import annotations

import math
import types
from pathlib import Path
from typing import Any

import numpy as np
import torch

from dit_lora.core.errors import UserError
from dit_lora.families.videollm.architecture import (
    OPENAI_CLIP_MEAN,
    OPENAI_CLIP_STD,
    VideoLLMSpec,
    frames_to_tensor,
    normalize,
    read_preprocessor_json,
    resize_frames,
)

__all__ = ["QWEN_VIDEO_DEFAULTS", "Qwen25VLSpec", "patchify_video", "smart_resize"]

# What Qwen2.5-VL's processors use when the folder's JSON lacks a key.  (min/max pixels: the
# values of the released checkpoints' preprocessor_config.json.)
QWEN_VIDEO_DEFAULTS: dict[str, Any] = {
    "min_pixels": 56 * 56,
    "max_pixels": 28 * 28 * 16384,
    "patch_size": 14,
    "temporal_patch_size": 2,
    "merge_size": 2,
    "image_mean": OPENAI_CLIP_MEAN,
    "image_std": OPENAI_CLIP_STD,
    "do_resize": True,
    "do_rescale": True,
    "rescale_factor": 1 / 255,
    "do_normalize": True,
    "resample": "bicubic",
    "fps": 2.0,
}

_RESAMPLE = {0: "nearest", 2: "bilinear", 3: "bicubic"}
_MAX_ASPECT_RATIO = 200  # what the Qwen processors accept
_HOOK_FLAG = "_dit_lora_mrope_hooks"


def smart_resize(height: int, width: int, factor: int, min_pixels: int, max_pixels: int) -> tuple[int, int]:
    """(h, w) closest to (height, width) with both multiples of ``factor`` and ``min_pixels <= h*w <= max_pixels``.

    Each side is first rounded to the nearest multiple of ``factor``; if the area is then too
    large, both sides are scaled down by the same factor and floored to multiples of ``factor``
    (never below ``factor``); if too small, scaled up and ceiled.  This is the rule of transformers'
    Qwen2-VL image and video processors, so grids (and token counts) agree with theirs.
    """
    if height < 1 or width < 1:
        raise ValueError(f"frame size must be positive, got {height} x {width}")
    if max(height, width) / min(height, width) > _MAX_ASPECT_RATIO:
        raise ValueError(
            f"frames of {height} x {width} have an aspect ratio above {_MAX_ASPECT_RATIO}, which Qwen2.5-VL does not accept"
        )
    h = round(height / factor) * factor
    w = round(width / factor) * factor
    if h * w > max_pixels:
        scale = math.sqrt(height * width / max_pixels)
        h = max(factor, math.floor(height / scale / factor) * factor)
        w = max(factor, math.floor(width / scale / factor) * factor)
    elif h * w < min_pixels:
        scale = math.sqrt(min_pixels / (height * width))
        h = math.ceil(height * scale / factor) * factor
        w = math.ceil(width * scale / factor) * factor
    return int(h), int(w)


def patchify_video(
    video: torch.Tensor, patch_size: int, temporal_patch_size: int, merge_size: int
) -> tuple[torch.Tensor, tuple[int, int, int]]:
    """Flatten normalised frames (F, C, H, W) into Qwen2.5-VL's ``pixel_values_videos`` rows.

    F must be a multiple of ``temporal_patch_size`` and H, W multiples of
    ``patch_size * merge_size``.  Returns ``(rows, (t, gh, gw))`` with rows of shape
    (t * gh * gw, C * tp * p * p): rows ordered (t, block_row, block_col, row_in_block,
    col_in_block), columns (channel, frame_in_temporal_patch, y, x); see the module docstring.
    """
    frames, channels, height, width = video.shape
    p, tp, m = patch_size, temporal_patch_size, merge_size
    if frames % tp or height % (p * m) or width % (p * m):
        raise ValueError(
            f"cannot patchify {frames} frames of {height} x {width}: need frames % {tp} == 0 and sides "
            f"divisible by {p * m}"
        )
    t, gh, gw = frames // tp, height // p, width // p
    # Split every axis into its factors: frames -> (t, tp); y -> (block_row, row_in_block, py);
    # x -> (block_col, col_in_block, px).
    split = video.reshape(t, tp, channels, gh // m, m, p, gw // m, m, p)
    # axes:                 0  1   2         3      4  5   6      7  8
    #                       t  tp  C         bh     mh py  bw     mw px
    ordered = split.permute(0, 3, 6, 4, 7, 2, 1, 5, 8)  # t, bh, bw, mh, mw | C, tp, py, px
    rows = ordered.reshape(t * gh * gw, channels * tp * p * p)
    return rows.contiguous(), (t, gh, gw)


class Qwen25VLSpec(VideoLLMSpec):
    """Qwen2.5-VL: window-attention ViT, 2 x 2 PatchMerger, Qwen2 language model with M-RoPE."""

    name = "qwen2_5_vl"
    model_class = "Qwen2_5_VLForConditionalGeneration"
    vision_tower = "model.visual"
    projector = "model.visual.merger"
    language_model = "model.language_model"
    video_placeholder = "<|vision_start|><|video_pad|><|vision_end|>"
    video_token = "<|video_pad|>"
    media_tokens = ("<|vision_start|>", "<|vision_end|>", "<|video_pad|>", "<|image_pad|>", "<|vision_pad|>")
    positions_encode_time = True  # M-RoPE's time axis: second_per_grid_ts = temporal_patch_size / sampled fps
    default_preprocessing = QWEN_VIDEO_DEFAULTS

    # -- loading ------------------------------------------------------------------------
    def load_model(
        self, path: str | Path, dtype: torch.dtype = torch.bfloat16, quantization_config=None
    ) -> torch.nn.Module:
        """Load the model (see the base class) and install :meth:`prepare_model`'s M-RoPE hooks."""
        return self.prepare_model(super().load_model(path, dtype, quantization_config=quantization_config))

    def prepare_model(self, model: torch.nn.Module) -> torch.nn.Module:
        """Make every forward/generate with video (or image) grids use 3-D M-RoPE positions.

        Installs (once per model) a forward pre-hook on ``model.model`` and a wrapper around
        ``model._prepare_position_ids_for_generation`` that fill a missing ``mm_token_type_ids``
        from ``input_ids`` (see the module docstring).  Explicitly passed ``mm_token_type_ids`` or
        ``position_ids`` are left alone.  Returns ``model``.
        """
        if getattr(model, _HOOK_FLAG, False):
            return model
        inner = self.module(model, "model")
        spec = self

        def fill(kwargs: dict, config: Any) -> None:
            input_ids = kwargs.get("input_ids")
            has_grid = kwargs.get("video_grid_thw") is not None or kwargs.get("image_grid_thw") is not None
            if input_ids is not None and input_ids.dim() == 2 and has_grid and kwargs.get("mm_token_type_ids") is None:
                kwargs["mm_token_type_ids"] = spec.mm_token_type_ids(input_ids, config)

        def pre_hook(module, args, kwargs):
            if args or kwargs.get("position_ids") is not None:
                return None  # positional call (not transformers' own) or positions given: leave it
            fill(kwargs, module.config)
            return args, kwargs

        inner.register_forward_pre_hook(pre_hook, with_kwargs=True)

        if hasattr(model, "_prepare_position_ids_for_generation"):

            def prepare_position_ids(owner, inputs_tensor, model_kwargs):
                probe = dict(model_kwargs)
                if probe.get("input_ids") is None and torch.is_tensor(inputs_tensor) and inputs_tensor.dim() == 2:
                    probe["input_ids"] = inputs_tensor
                fill(probe, owner.config)
                if probe.get("mm_token_type_ids") is not None:
                    model_kwargs["mm_token_type_ids"] = probe["mm_token_type_ids"]
                return type(owner)._prepare_position_ids_for_generation(owner, inputs_tensor, model_kwargs)

            # A bound method (not a closure over `model`): copy.deepcopy rebinds it to the copy. (torch types
            # nn.Module.__setattr__'s value as Tensor | Module; a module takes any attribute.)
            model._prepare_position_ids_for_generation = types.MethodType(  # type: ignore[assignment]
                prepare_position_ids, model
            )
        setattr(model, _HOOK_FLAG, True)
        return model

    @staticmethod
    def mm_token_type_ids(input_ids: torch.Tensor, config: Any) -> torch.Tensor:
        """Per-token modality (0 text, 1 image token, 2 video token), as transformers' processor builds it."""
        types = torch.zeros_like(input_ids, dtype=torch.int32)
        types[input_ids == config.image_token_id] = 1
        types[input_ids == config.video_token_id] = 2
        return types

    def text_inputs(self, input_ids: torch.Tensor, config: Any) -> dict[str, torch.Tensor]:
        """Model kwargs that depend on the (padded, 2-D) ``input_ids``: ``mm_token_type_ids``."""
        return {"mm_token_type_ids": self.mm_token_type_ids(input_ids, config)}

    def load_preprocessing(self, path: str | Path) -> dict[str, Any]:
        """Qwen2-VL video preprocessing settings from the model folder, with :data:`QWEN_VIDEO_DEFAULTS`.

        Reads ``video_preprocessor_config.json`` if the folder has one, else
        ``preprocessor_config.json`` (what transformers' video processor loads); pixel limits come
        from ``min_pixels``/``max_pixels`` or, in newer files, ``size`` =
        ``{"shortest_edge": min, "longest_edge": max}`` (both are pixel counts, not edges).
        Returns ``min_pixels``, ``max_pixels``, ``patch_size``, ``temporal_patch_size``,
        ``merge_size``, ``image_mean``, ``image_std``, ``do_resize``, ``do_rescale``,
        ``rescale_factor``, ``do_normalize``, ``resample`` (interpolate mode) and ``fps``.
        """
        folder = self._local_dir(path, "model path")
        raw = read_preprocessor_json(folder, ("video_preprocessor_config.json",))
        if not raw:
            raw = read_preprocessor_json(folder, ("preprocessor_config.json",))
        prep = dict(self.default_preprocessing)  # a subclass's own defaults (Qwen3-VL: 16 px patches, mean 0.5)
        size = raw.get("size")
        if isinstance(size, dict):
            if size.get("shortest_edge") is not None:
                prep["min_pixels"] = int(size["shortest_edge"])
            if size.get("longest_edge") is not None:
                prep["max_pixels"] = int(size["longest_edge"])
        for key in ("min_pixels", "max_pixels", "patch_size", "temporal_patch_size", "merge_size"):
            if raw.get(key) is not None:
                prep[key] = int(raw[key])
        for key in ("image_mean", "image_std"):
            if raw.get(key) is not None:
                prep[key] = tuple(float(v) for v in raw[key])
        for key in ("do_resize", "do_rescale", "do_normalize"):
            if raw.get(key) is not None:
                prep[key] = bool(raw[key])
        if raw.get("rescale_factor") is not None:
            prep["rescale_factor"] = float(raw["rescale_factor"])
        if raw.get("resample") is not None:
            prep["resample"] = _RESAMPLE.get(raw["resample"], "bicubic")
        if raw.get("fps") is not None:
            prep["fps"] = float(raw["fps"])
        if prep["min_pixels"] > prep["max_pixels"]:
            raise UserError(
                f"the preprocessor config in {folder} has min_pixels {prep['min_pixels']} > "
                f"max_pixels {prep['max_pixels']}"
            )
        return prep

    # -- frames -> model inputs ---------------------------------------------------------
    def resized_size(self, height: int, width: int, prep: dict[str, Any]) -> tuple[int, int]:
        """The (h, w) frames of ``height`` x ``width`` are resized to (:func:`smart_resize`)."""
        factor = int(prep["patch_size"]) * int(prep["merge_size"])
        return smart_resize(height, width, factor, int(prep["min_pixels"]), int(prep["max_pixels"]))

    def frame_size(self, num_frames: int, height: int, width: int, prep: dict[str, Any]) -> tuple[int, int]:
        """The (h, w) a clip of ``num_frames`` frames of ``height`` x ``width`` is resized to: each frame's own
        :meth:`resized_size` (Qwen3-VL's budget is the whole clip's)."""
        return self.resized_size(height, width, prep)

    def patch_rows(self, frames: np.ndarray, prep: dict[str, Any]) -> tuple[torch.Tensor, tuple[int, int, int]]:
        """The video processor's patch rows (rows, C*tp*p*p) and grid (t, h, w) for uint8 frames (F, H, W, 3):
        resized to :meth:`frame_size`, rescaled and normalised, the last frame repeated up to a whole temporal
        patch."""
        video = frames_to_tensor(frames)  # (F, 3, H, W) float in [0, 255]
        p, tp, m = int(prep["patch_size"]), int(prep["temporal_patch_size"]), int(prep["merge_size"])
        height, width = video.shape[-2:]
        if prep.get("do_resize", True):
            size = self.frame_size(video.shape[0], height, width, prep)
            video = resize_frames(video, size, prep.get("resample", "bicubic"))
        elif height % (p * m) or width % (p * m):
            raise ValueError(f"do_resize is off but frames of {height} x {width} are not multiples of {p * m}")
        factor = float(prep.get("rescale_factor", 1 / 255)) if prep.get("do_rescale", True) else 1.0
        if prep.get("do_normalize", True):
            video = normalize(video, prep["image_mean"], prep["image_std"], factor)
        else:
            video = video * factor
        if pad := -video.shape[0] % tp:  # repeat the last frame up to a whole temporal patch
            video = torch.cat([video, video[-1:].expand(pad, -1, -1, -1)])
        return patchify_video(video, p, tp, m)

    def frame_inputs(
        self, frames: np.ndarray, prep: dict[str, Any], *, fps: float | None = None
    ) -> dict[str, torch.Tensor]:
        """``pixel_values_videos`` (rows, C*tp*p*p) float32, ``video_grid_thw`` (3,) long and
        ``second_per_grid_ts`` (0-d float32) for uint8 frames (F, H, W, 3); see the module docstring.

        ``fps``: the rate the frames were sampled at (default ``prep["fps"]``).
        """
        rows, grid = self.patch_rows(frames, prep)
        tp = int(prep["temporal_patch_size"])
        rate = float(fps if fps is not None else prep.get("fps", QWEN_VIDEO_DEFAULTS["fps"]))
        if rate <= 0:
            raise ValueError(f"fps must be positive, got {rate}")
        return {
            "pixel_values_videos": rows.float(),
            "video_grid_thw": torch.tensor(grid, dtype=torch.long),
            "second_per_grid_ts": torch.tensor(tp / rate, dtype=torch.float32),
        }

    def video_token_count(self, frame_inputs: dict[str, torch.Tensor], config: Any) -> int:
        """``t * gh * gw // merge_size**2``: one LLM token per merged 2 x 2 block of patches."""
        vision = getattr(config, "vision_config", config)
        merge = int(vision.spatial_merge_size)
        grid = frame_inputs["video_grid_thw"]
        t, gh, gw = (int(v) for v in grid.tolist())
        rows = frame_inputs["pixel_values_videos"]
        row_size = int(vision.in_channels) * int(vision.temporal_patch_size) * int(vision.patch_size) ** 2
        if rows.shape != (t * gh * gw, row_size) or gh % merge or gw % merge:
            raise ValueError(
                f"pixel_values_videos {tuple(rows.shape)} with grid {(t, gh, gw)} does not fit this model (rows of "
                f"{row_size}, grid sides divisible by {merge}): the preprocessor config disagrees with config.json"
            )
        return t * gh * gw // merge**2

    def collate_patch_rows(self, items: list[dict[str, torch.Tensor]]) -> dict[str, torch.Tensor]:
        """Concatenate the samples' patch rows (one video per sample, in batch order), stack the grids."""
        if not items:
            raise ValueError("collate_pixels needs at least one sample")
        return {
            "pixel_values_videos": torch.cat([it["pixel_values_videos"] for it in items]),
            "video_grid_thw": torch.stack([it["video_grid_thw"].reshape(3) for it in items]),
        }

    def collate_pixels(self, items: list[dict[str, torch.Tensor]]) -> dict[str, torch.Tensor]:
        """:meth:`collate_patch_rows`, and each sample's seconds per temporal patch stacked."""
        batch = self.collate_patch_rows(items)
        batch["second_per_grid_ts"] = torch.stack([it["second_per_grid_ts"].reshape(()) for it in items])
        return batch
