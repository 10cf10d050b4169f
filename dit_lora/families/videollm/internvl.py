"""InternVL3.5 (``InternVLForConditionalGeneration``, the ``OpenGVLab/InternVL3_5-*-HF`` repos) as a
:class:`~dit_lora.families.videollm.architecture.VideoLLMSpec`.

Module layout in transformers 5.x::

    model.vision_tower            InternVLVisionModel (InternViT-300M: 24 layers, 448 px, 14 px patches)
    model.multi_modal_projector   LayerNorm + Linear + GELU + Linear (the projector, after a 2 x 2 pixel shuffle)
    model.language_model          Qwen3Model (LoRA goes here only)
    lm_head

**Frames.** Each sampled frame is one 448 x 448 tile (the video path never tiles: transformers'
``InternVLVideoProcessor`` resizes every frame to ``size`` without keeping the aspect ratio, bicubic, then
rescales and normalises with ImageNet's mean/std, the values of the repos' ``video_preprocessor_config.json``).
The vision tower's 32 x 32 patch grid is pixel-shuffled by ``downsample_ratio`` 0.5 to 16 x 16 = 256 language-model
tokens per frame (:meth:`InternVLSpec.video_token_count`).

**Prompt.** The chat template (the processor's own, ``chat_template.jinja`` of the HF repos, written by
transformers' ``convert_internvl_weights_to_hf.py``) renders ``{"type": "video"}`` as ``<video>\\n``; the processor
(``InternVLProcessor.replace_video_token``) then replaces ``<video>`` with one line per frame::

    Frame1: <img><IMG_CONTEXT> x 256</img>
    Frame2: <img><IMG_CONTEXT> x 256</img> ...

and the model scatters the frames' features into the ``<IMG_CONTEXT>`` positions (``config.image_token_id``).
:meth:`InternVLSpec.video_prompt_ids` builds exactly those token ids (a test holds them equal to the processor's
own replacement tokenized by the tokenizer). InternVL's own fine-tuning script writes ``Frame-1:`` instead
(``internvl_chat/internvl/train/internvl_chat_finetune.py``); the HF processor, which is what loads an adapter
trained here, writes ``Frame1:``, so that is what training sees.

**Time.** InternVL3.5 has no time in its prompt and no time in its positions (1-D RoPE over the tokens): its
template and processor write frame numbers, not seconds, and neither the InternVL repo's chat code nor its
fine-tuning code puts times in the prompt. What time does decide is which frames are sampled: the centres of
``--num_frames`` equal segments of the decoded stream (:func:`~dit_lora.families.videollm.data.sample_frame_indices`:
InternVL's ``get_index`` and ``InternVLVideoProcessor.sample_frames`` with ``initial_shift=True``), so frame ``i``
is at second ``(i + 0.5) / fps`` with ``fps`` the rate the decoder's frames were sampled at
(:attr:`~dit_lora.families.videollm.data.SampledClip.fps`, from the stream's own rate, never an assumed one):
:func:`frame_times`. A clip at another frame rate gives other times for the same frames, and the same prompt.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import torch

from dit_lora.core.errors import UserError
from dit_lora.families.videollm.architecture import (
    VideoLLMSpec,
    device_causal_mask,
    overlay_preprocessing,
    read_preprocessor_json,
)

__all__ = ["IMAGENET_MEAN", "IMAGENET_STD", "INTERNVL_VIDEO_DEFAULTS", "InternVLSpec", "frame_times"]

# The normalisation of InternViT (the repos' preprocessor configs; transformers' class defaults are CLIP's).
IMAGENET_MEAN = (0.485, 0.456, 0.406)
IMAGENET_STD = (0.229, 0.224, 0.225)

#: what the published ``video_preprocessor_config.json`` holds, used for keys a folder's file lacks
INTERNVL_VIDEO_DEFAULTS: dict[str, Any] = {
    "image_mean": IMAGENET_MEAN,
    "image_std": IMAGENET_STD,
    "shortest_edge": None,
    "resize_to": (448, 448),
    "crop_size": None,
    "do_resize": True,
    "do_center_crop": False,
    "do_rescale": True,
    "rescale_factor": 1 / 255,
    "do_normalize": True,
    "resample": "bicubic",
}

_RESAMPLE = {0: "nearest", 2: "bilinear", 3: "bicubic"}
_MASK_FLAG = "_dit_lora_internvl_mask"


def frame_times(num_frames: int, fps: float | None) -> list[float] | None:
    """Seconds into the clip of the ``num_frames`` sampled frames: the centres of equal segments, ``(i + 0.5) / fps``.

    ``fps`` is the rate the frames were sampled at (``SampledClip.fps``: ``num_frames / total_frames`` times the
    stream's own rate); None (a container that states no rate) gives None: no time is ever assumed.
    """
    if fps is None:
        return None
    if fps <= 0:
        raise ValueError(f"fps must be positive, got {fps}")
    return [(i + 0.5) / fps for i in range(num_frames)]


class InternVLSpec(VideoLLMSpec):
    """InternVL3.5: InternViT tower, pixel-shuffle MLP projector, Qwen3 language model; 256 tokens a frame."""

    name = "internvl"
    model_class = "InternVLForConditionalGeneration"
    vision_tower = "model.vision_tower"
    projector = "model.multi_modal_projector"
    language_model = "model.language_model"
    video_placeholder = "<video>"  # the template renders {"type": "video"} as "<video>\n"
    video_token = "<video>"
    media_tokens = ("<video>", "<image>", "<img>", "</img>", "<IMG_CONTEXT>")  # the processor's per-frame lines
    default_preprocessing = INTERNVL_VIDEO_DEFAULTS

    # -- loading ------------------------------------------------------------------------
    def load_model(
        self, path: str | Path, dtype: torch.dtype = torch.bfloat16, quantization_config=None
    ) -> torch.nn.Module:
        """Load the model (see the base class) with :meth:`prepare_model`'s placeholder mask."""
        return self.prepare_model(super().load_model(path, dtype, quantization_config=quantization_config))

    def prepare_model(self, model: torch.nn.Module) -> torch.nn.Module:
        """The image-token mask without transformers' count check, which reads the device in every forward.

        ``InternVLModel.get_placeholder_mask`` compares the token count with the features through a device tensor
        and an f-string (two host syncs per step); the prompt builder already counts the tokens on the host, one
        ``<IMG_CONTEXT>`` per feature, so the mask is the token comparison alone. Returns ``model``.
        """
        if getattr(model, _MASK_FLAG, False):
            return model
        inner = self.module(model, "model")
        config = inner.config

        def placeholder_mask(input_ids=None, inputs_embeds=None, image_features=None, **_):
            if input_ids is None:  # embeddings only: transformers' own comparison (generate never takes this path)
                token = inner.get_input_embeddings()(
                    torch.full((), config.image_token_id, dtype=torch.long, device=inputs_embeds.device)
                )
                return (inputs_embeds == token).all(-1).unsqueeze(-1)
            return (input_ids == config.image_token_id).unsqueeze(-1).to(inputs_embeds.device)

        # (torch types nn.Module.__setattr__'s value as Tensor | Module; a module takes any attribute)
        inner.get_placeholder_mask = placeholder_mask  # type: ignore[assignment]
        setattr(model, _MASK_FLAG, True)
        return model

    def load_preprocessing(self, path: str | Path) -> dict[str, Any]:
        """The video preprocessing of the folder's ``video_preprocessor_config.json`` (else
        ``preprocessor_config.json``), with :data:`INTERNVL_VIDEO_DEFAULTS` for missing keys.

        ``size`` is ``{"height", "width"}`` (every frame resized to it, as the video processor does) or
        ``{"shortest_edge": N}``; keys written as null are missing ones.
        """
        folder = self._local_dir(path, "model path")
        raw = read_preprocessor_json(folder, ("video_preprocessor_config.json",))
        if not raw:
            raw = read_preprocessor_json(folder, ("preprocessor_config.json",))
        raw = {k: v for k, v in raw.items() if v is not None}
        prep = dict(INTERNVL_VIDEO_DEFAULTS)
        overlay_preprocessing(prep, raw)
        if "resample" in raw:
            prep["resample"] = _RESAMPLE.get(raw["resample"], "bicubic")
        size = raw.get("size")
        if isinstance(size, dict) and "height" in size and "width" in size:
            prep["resize_to"], prep["shortest_edge"] = (int(size["height"]), int(size["width"])), None
        elif isinstance(size, dict) and size.get("shortest_edge"):
            prep["resize_to"], prep["shortest_edge"] = None, int(size["shortest_edge"])
        elif size is not None:
            raise UserError(
                f"the preprocessor config in {folder} has size {size!r}; InternVL needs {{'height': H, 'width': W}} "
                "(the published files have 448 x 448)"
            )
        if "crop_size" in raw and isinstance(raw["crop_size"], dict):
            prep["crop_size"] = (int(raw["crop_size"]["height"]), int(raw["crop_size"]["width"]))
        return prep

    # -- frames -> model inputs ---------------------------------------------------------
    def frame_inputs(
        self, frames: np.ndarray, prep: dict[str, Any], *, fps: float | None = None
    ) -> dict[str, torch.Tensor]:
        """``{"pixel_values": (F, 3, S, S) float32}``: each frame one tile (see the module docstring).

        ``fps`` does not enter the pixels or the prompt: InternVL3.5 encodes no time (module docstring).
        """
        pixels = self.preprocess_frames(frames, prep)
        if pixels.shape[-1] != pixels.shape[-2]:
            raise ValueError(
                f"InternVL needs square frames (one tile each), preprocessing gave {tuple(pixels.shape[-2:])}; "
                "set size to {'height': S, 'width': S} in the model folder's video_preprocessor_config.json"
            )
        return {"pixel_values": pixels}

    @staticmethod
    def tokens_per_frame(config: Any, side: int | None = None) -> int:
        """Language-model tokens of one ``side`` x ``side`` frame (default: the tower's size): the patch grid after
        the pixel shuffle, ``(side / patch * downsample_ratio) ** 2`` (256 for the published models)."""
        vision = config.vision_config
        size = vision.image_size[0] if isinstance(vision.image_size, (list, tuple)) else vision.image_size
        patch = vision.patch_size[0] if isinstance(vision.patch_size, (list, tuple)) else vision.patch_size
        grid = int(side or size) // int(patch)
        shuffled = grid * float(config.downsample_ratio)
        if shuffled != int(shuffled) or int(side or size) % int(patch):
            raise ValueError(
                f"frames of {side or size} px make a {grid} x {grid} patch grid that downsample_ratio "
                f"{config.downsample_ratio} cannot shuffle evenly; use the tower's image_size ({size})"
            )
        return int(shuffled) ** 2

    def video_token_count(self, frame_inputs: dict[str, torch.Tensor], config: Any) -> int:
        """``F * tokens_per_frame``: one ``<IMG_CONTEXT>`` per feature of each frame."""
        pixels = frame_inputs["pixel_values"]
        if pixels.dim() != 4:
            raise ValueError(f"pixel_values must be one sample (F, 3, S, S), got shape {tuple(pixels.shape)}")
        return int(pixels.shape[0]) * self.tokens_per_frame(config, int(pixels.shape[-1]))

    def video_prompt_ids(
        self, tokenizer, video_tokens: int, config: Any, times: Sequence[float] | None = None
    ) -> list[int]:
        """The ids ``InternVLProcessor`` puts where ``<video>`` was: ``Frame{i}: <img>`` + ``<IMG_CONTEXT>`` per
        feature + ``</img>``, the frames on lines of their own (``video_tokens``: all frames' features; ``times``
        are not written: InternVL3.5's prompt has frame numbers only)."""
        per_frame = self.tokens_per_frame(config)
        if video_tokens % per_frame:
            raise ValueError(f"{video_tokens} video tokens are not whole frames of {per_frame} tokens")
        found = {t: tokenizer.convert_tokens_to_ids(t) for t in ("<img>", "</img>", "<IMG_CONTEXT>")}
        missing = [t for t, i in found.items() if i is None or i == tokenizer.unk_token_id]
        if missing:
            raise UserError(
                f"the tokenizer has no {', '.join(missing)} token: it is not an InternVL tokenizer. Point "
                "--pretrained_model_name_or_path at an InternVL -HF repo (its tokenizer files beside config.json)."
            )
        start, end, context = found["<img>"], found["</img>"], int(config.image_token_id)
        if found["<IMG_CONTEXT>"] != context:
            raise UserError(
                f"the tokenizer's <IMG_CONTEXT> is id {tokenizer.convert_tokens_to_ids('<IMG_CONTEXT>')} but "
                f"config.json's image_token_id is {context}: the tokenizer files and config.json are from "
                "different checkpoints"
            )
        ids: list[int] = []
        for i in range(video_tokens // per_frame):
            # the text between the special tokens, tokenized as the processor's whole prompt tokenizes it
            ids += tokenizer(f"{chr(10) if i else ''}Frame{i + 1}: ", add_special_tokens=False)["input_ids"]
            ids += [start] + [context] * per_frame + [end]
        return ids

    def step_inputs(self, inputs: dict[str, torch.Tensor], config: Any) -> dict[str, torch.Tensor]:
        """The padding mask as a 4-D causal mask built on the device (a 2-D one makes transformers ask the host
        whether there is padding: a sync each step)."""
        text = getattr(config, "text_config", config)
        window = getattr(text, "sliding_window", None) if getattr(text, "use_sliding_window", False) else None
        return device_causal_mask(inputs, window)

    def collate_pixels(self, items: list[dict[str, torch.Tensor]]) -> dict[str, torch.Tensor]:
        """Every sample's frames one after another, ``{"pixel_values": (sum F, 3, S, S)}``: the model fills the
        ``<IMG_CONTEXT>`` tokens in batch order, frame by frame."""
        if not items:
            raise ValueError("collate_pixels needs at least one sample")
        return {"pixel_values": torch.cat([item["pixel_values"] for item in items])}
