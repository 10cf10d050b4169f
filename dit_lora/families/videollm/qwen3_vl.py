"""Qwen3-VL (``Qwen3VLForConditionalGeneration``, the dense ``Qwen/Qwen3-VL-*-Instruct`` repos) as a
:class:`~dit_lora.families.videollm.architecture.VideoLLMSpec`.

Module layout in transformers 5.x::

    model.visual                       Qwen3VLVisionModel (SigLIP-2-style ViT, 16 px patches, learned position grid)
      .patch_embed.proj                Conv3d, kernel = stride = (temporal_patch, patch, patch), with bias
      .merger                          2 x 2 patches -> one LLM token (the projector)
      .deepstack_merger_list.N         DeepStack: features of the blocks ``deepstack_visual_indexes`` are merged the
                                       same way and added to the hidden states of the first LLM layers
    model.language_model               Qwen3VLTextModel (Qwen3: q/k RMSNorm, interleaved M-RoPE; LoRA goes here only)
    lm_head

**Frames.** What ``Qwen3VLVideoProcessor`` feeds the model, reproduced without torchvision (as for Qwen2.5-VL): the
clip is resized to (h, w), multiples of ``patch_size * merge_size`` (32), by :func:`video_smart_resize` (the
processor's rule: the pixel budget ``size = {"shortest_edge", "longest_edge"}`` bounds the whole clip, frames times
area, not one frame), bicubic; rescaled and normalised with mean = std = 0.5; padded to whole temporal patches by
repeating the last frame; and flattened in Qwen2.5-VL's row order (:func:`~dit_lora.families.videollm.qwen2_5_vl.
patchify_video`, the permutation of ``Qwen3VLVideoProcessor.patchify``).

**Time is text.** Qwen3-VL has no time axis in its positions: ``get_rope_index`` splits a video of ``t`` temporal
patches into ``t`` one-patch grids, and the processor (``Qwen3VLProcessor.replace_video_token``) writes each
patch's time in seconds before it::

    <|vision_start|><0.3 seconds><|vision_start|><|video_pad|> x n<|vision_end|><1.3 seconds><|vision_start|>...
    <|vision_end|><|vision_end|>

The outer ``<|vision_start|>``/``<|vision_end|>`` are the chat template's: transformers 5.x replaces only
``<|video_pad|>`` (4.57 and qwen-vl-utils replaced the three tokens; vLLM follows transformers now, vllm-project/vllm
#46817). A patch's time is the mean of its frames' times (``_calculate_timestamps``), and a frame's time is its index
in the stream over the stream's own rate, the decoder's (:attr:`~dit_lora.families.videollm.data.SampledClip.times`),
never an assumed one: a clip whose container states no rate is refused (transformers would assume 24 fps).
:meth:`Qwen3VLSpec.video_prompt_ids` writes those ids; a test holds them equal to the processor's.

**M-RoPE.** As in Qwen2.5-VL, transformers computes the 3-D positions only from ``mm_token_type_ids`` (and raises
without them): the inherited :meth:`~dit_lora.families.videollm.qwen2_5_vl.Qwen25VLSpec.prepare_model` hook fills
them from ``input_ids``.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import torch

from dit_lora.core.errors import UserError
from dit_lora.families.videollm import qwen3_vl_moe
from dit_lora.families.videollm.architecture import read_preprocessor_json
from dit_lora.families.videollm.qwen2_5_vl import Qwen25VLSpec

__all__ = ["QWEN3_VIDEO_DEFAULTS", "Qwen3VLSpec", "patch_times", "video_smart_resize"]

#: what the published ``video_preprocessor_config.json`` holds (every Qwen3-VL repo), for keys a folder's file lacks
#: and the offline plan (transformers' class values are a smaller budget, 128 and 768 x 32 x 32 pixels)
QWEN3_VIDEO_DEFAULTS: dict[str, Any] = {
    "min_pixels": 4096,  # size["shortest_edge"]: a pixel count over the whole clip
    "max_pixels": 24576 * 32 * 32,  # size["longest_edge"] = 25165824
    "patch_size": 16,
    "temporal_patch_size": 2,
    "merge_size": 2,
    "image_mean": (0.5, 0.5, 0.5),
    "image_std": (0.5, 0.5, 0.5),
    "do_resize": True,
    "do_rescale": True,
    "rescale_factor": 1 / 255,
    "do_normalize": True,
    "resample": "bicubic",
    "cap_pixels_per_frame": False,  # transformers 5.23's default (qwen-vl-utils caps)
    "max_video_tokens": 768,
}

_RESAMPLE = {0: "nearest", 2: "bilinear", 3: "bicubic"}


def video_smart_resize(
    num_frames: int, height: int, width: int, temporal_factor: int, factor: int, min_pixels: int, max_pixels: int
) -> tuple[int, int]:
    """(h, w) for a clip of ``num_frames`` frames: ``Qwen3VLVideoProcessor``'s ``smart_resize``.

    Sides are rounded to multiples of ``factor``; when ``frames x h x w`` (frames rounded to whole temporal patches)
    leaves ``[min_pixels, max_pixels]``, both sides are scaled by the same factor and floored (too large) or ceiled
    (too small). Frames smaller than ``factor`` are first scaled up to it.
    """
    if height < factor or width < factor:
        scale = max(factor / height, factor / width)
        height, width = int(height * scale), int(width * scale)
    if max(height, width) / min(height, width) > 200:
        raise ValueError(f"frames of {height} x {width} have an aspect ratio above 200, which Qwen3-VL refuses")
    h, w = round(height / factor) * factor, round(width / factor) * factor
    t = round(num_frames / temporal_factor) * temporal_factor
    if t * h * w > max_pixels:
        beta = math.sqrt(num_frames * height * width / max_pixels)
        h = max(factor, math.floor(height / beta / factor) * factor)
        w = max(factor, math.floor(width / beta / factor) * factor)
    elif t * h * w < min_pixels:
        beta = math.sqrt(min_pixels / (num_frames * height * width))
        h, w = math.ceil(height * beta / factor) * factor, math.ceil(width * beta / factor) * factor
    return int(h), int(w)


def patch_times(times: Sequence[float], temporal_patch_size: int) -> list[float]:
    """Seconds of each temporal patch: the mean of its first and last frame's (``_calculate_timestamps``; the last
    frame repeated up to a whole patch, as the pixels are)."""
    seconds = list(times) + [times[-1]] * (-len(times) % temporal_patch_size)
    tp = temporal_patch_size
    return [(seconds[i] + seconds[i + tp - 1]) / 2 for i in range(0, len(seconds), tp)]


class Qwen3VLSpec(Qwen25VLSpec):
    """Qwen3-VL: ViT with DeepStack mergers, Qwen3 language model, the time of each frame in the prompt; dense, or
    (``sparse``) its MoE, whose differences are :mod:`.qwen3_vl_moe`'s."""

    name = "qwen3_vl"
    model_class = "Qwen3VLForConditionalGeneration"
    projector = "model.visual.merger"
    # time is in the prompt's text, not in the positions: the prompt, not the pixels, reads the frames' times
    positions_encode_time = False
    default_preprocessing = QWEN3_VIDEO_DEFAULTS
    liger_patch = "qwen3_vl"  # Liger names it by the whole model; its model_type is qwen3_vl_text
    liger_swiglu = False  # Liger's Qwen3-VL patch takes the flag and patches no MLP
    #: the MoE checkpoints (``Qwen3VLMoeForConditionalGeneration``): their router's loss is turned off at load
    sparse = False

    def __init__(self, *, sparse: bool = False) -> None:
        """The dense Qwen3-VL; ``sparse``: its MoE (:mod:`.qwen3_vl_moe`: another family name, class and Liger
        patch, LoRA on the attention only, the router's load-balancing loss off)."""
        if sparse:
            self.sparse = True
            self.name, self.model_class = qwen3_vl_moe.NAME, qwen3_vl_moe.MODEL_CLASS
            self.liger_patch = qwen3_vl_moe.LIGER_PATCH

    def load_model(
        self, path: str | Path, dtype: torch.dtype = torch.bfloat16, quantization_config=None
    ) -> torch.nn.Module:
        """Qwen2.5-VL's loader (the M-RoPE hooks); for the MoE, with the router's loss off."""
        model = super().load_model(path, dtype, quantization_config)
        return qwen3_vl_moe.without_router_loss(model) if self.sparse else model

    def load_preprocessing(self, path: str | Path) -> dict[str, Any]:
        """The folder's ``video_preprocessor_config.json`` (else ``preprocessor_config.json``) over
        :data:`QWEN3_VIDEO_DEFAULTS`: Qwen2.5-VL's keys plus ``cap_pixels_per_frame`` and ``max_video_tokens``."""
        prep = super().load_preprocessing(path)  # over this class's default_preprocessing
        prep.pop("fps", None)  # Qwen2.5-VL's sampling rate: Qwen3-VL's time comes from the decoder
        folder = self._local_dir(path, "model path")
        raw = read_preprocessor_json(folder, ("video_preprocessor_config.json",)) or read_preprocessor_json(
            folder, ("preprocessor_config.json",)
        )
        if raw.get("cap_pixels_per_frame") is not None:
            prep["cap_pixels_per_frame"] = bool(raw["cap_pixels_per_frame"])
        if raw.get("max_video_tokens") is not None:
            prep["max_video_tokens"] = int(raw["max_video_tokens"])
        return prep

    def resized_clip_size(self, num_frames: int, height: int, width: int, prep: dict[str, Any]) -> tuple[int, int]:
        """The (h, w) a clip of ``num_frames`` frames is resized to (the processor's ``resize``, cap included)."""
        factor = int(prep["patch_size"]) * int(prep["merge_size"])
        max_pixels = int(prep["max_pixels"])
        if prep.get("cap_pixels_per_frame"):
            frame_cap = int(prep["max_video_tokens"]) * factor * factor
            per_frame = max(min(frame_cap, max_pixels // num_frames), int(int(prep["min_pixels"]) * 1.05))
            max_pixels = per_frame * num_frames
        return video_smart_resize(
            num_frames, height, width, int(prep["temporal_patch_size"]), factor, int(prep["min_pixels"]), max_pixels
        )

    def frame_size(self, num_frames: int, height: int, width: int, prep: dict[str, Any]) -> tuple[int, int]:
        return self.resized_clip_size(num_frames, height, width, prep)

    def frame_inputs(
        self, frames: np.ndarray, prep: dict[str, Any], *, fps: float | None = None
    ) -> dict[str, torch.Tensor]:
        """``pixel_values_videos`` (rows, C*tp*p*p) float32 and ``video_grid_thw`` (3,) long for uint8 frames.

        ``fps`` does not enter the pixels: Qwen3-VL's time is the prompt's (:meth:`video_prompt_ids`).
        """
        rows, grid = self.patch_rows(frames, prep)
        return {"pixel_values_videos": rows.float(), "video_grid_thw": torch.tensor(grid, dtype=torch.long)}

    def video_prompt_ids(
        self, tokenizer, video_tokens: int, config: Any, times: Sequence[float] | None = None
    ) -> list[int]:
        """The ids ``Qwen3VLProcessor`` puts where ``<|video_pad|>`` was: per temporal patch, ``<{t:.1f} seconds>``
        then ``<|vision_start|>``, its ``<|video_pad|>`` tokens and ``<|vision_end|>`` (``times``: each sampled
        frame's second in the clip, from the decoder)."""
        if times is None or len(times) == 0:
            raise UserError(
                "Qwen3-VL writes each frame's time in the prompt, and this clip's container states no frame rate, so "
                "its frames have no times. Re-encode it with a rate (e.g. `ffmpeg -i in.mp4 -r 30 out.mp4`) or drop "
                "it from the data."
            )
        seconds = patch_times(times, int(config.vision_config.temporal_patch_size))
        if video_tokens % len(seconds):
            raise ValueError(f"{video_tokens} video tokens are not {len(seconds)} equal temporal patches")
        start, end = int(config.vision_start_token_id), int(config.vision_end_token_id)
        pad = int(config.video_token_id)
        per_patch = video_tokens // len(seconds)
        ids: list[int] = []
        for second in seconds:
            # between two special tokens: tokenized alone it is what the processor's whole prompt gives
            ids += tokenizer(f"<{second:.1f} seconds>", add_special_tokens=False)["input_ids"]
            ids += [start] + [pad] * per_patch + [end]
        return ids

    def collate_pixels(self, items: list[dict[str, torch.Tensor]]) -> dict[str, torch.Tensor]:
        """The patch rows and grids only (:meth:`collate_patch_rows`): Qwen3-VL's time is in the prompt."""
        return self.collate_patch_rows(items)
