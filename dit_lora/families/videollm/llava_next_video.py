"""The LLaVA-NeXT-Video spec (``llava-hf/LLaVA-NeXT-Video-7B-hf`` and -34B, DPO variants).

Architecture (transformers 5): ``LlavaNextVideoForConditionalGeneration`` has children
``model`` and ``lm_head``; ``model`` holds ``vision_tower`` (CLIP ViT), ``vision_resampler``
(the video pooler), ``multi_modal_projector`` and ``language_model`` (Llama/Mistral/Yi).

Video path (``LlavaNextVideoModel.get_video_features``): ``pixel_values_videos`` of shape
(B, F, 3, S, S) are flattened to B*F images and run through CLIP; the hidden states of
``vision_feature_layer`` lose their CLS token (strategy ``"default"``), leaving a
``(S/patch) x (S/patch)`` grid per frame, which the pooler reduces with a ``stride`` x
``stride`` average (or max, or strided conv) pool, then the projector maps each pooled
feature to one language-model embedding.  So a clip of F frames needs

    F * ((S // patch) // stride) ** 2     video tokens

(pooling floors, so an odd grid loses its last row/column), 144 per frame for the 7B model
(336 // 14 = 24 -> 12 x 12).  The forward raises "Video features and video tokens do not
match" when ``input_ids`` holds another number of ``<video>`` tokens.  (The processor
computes ``grid**2 // 4`` per frame, equal to this for the even grids real models have.)

Frames must be exactly ``vision_config.image_size`` square: CLIP's position embeddings are
fixed-size and the pooler assumes a square grid, so preprocessing resizes the shortest edge
and center-crops to the crop size, like the real video processor (224 -> the model's 336 is
set by the repo's preprocessor config).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

from dit_lora.families.videollm.architecture import VideoLLMSpec, device_causal_mask

__all__ = ["LlavaNextVideoSpec"]


class LlavaNextVideoSpec(VideoLLMSpec):
    """LLaVA-NeXT-Video: CLIP tower, 2x2 average-pooled frames, Llama/Mistral language model."""

    name = "llava_next_video"
    model_class = "LlavaNextVideoForConditionalGeneration"
    vision_tower = "model.vision_tower"
    projector = "model.multi_modal_projector"
    language_model = "model.language_model"
    # The chat templates of the llava-hf repos render {"type": "video"} as "<video>\n".
    video_placeholder = "<video>"
    video_token = "<video>"
    media_tokens = ("<video>", "<image>")

    # The real repos ship 336 px; these defaults apply only to keys missing from the folder's JSON.
    default_preprocessing = dict(VideoLLMSpec.default_preprocessing, shortest_edge=336, crop_size=(336, 336))

    def frame_inputs(
        self, frames: np.ndarray, prep: dict[str, Any], *, fps: float | None = None
    ) -> dict[str, torch.Tensor]:
        """``{"pixel_values_videos": (F, 3, S, S) float32}``, CLIP-normalised (see ``load_preprocessing``).

        ``fps`` is unused: LLaVA-NeXT-Video's positions do not encode time.
        """
        pixels = self.preprocess_frames(frames, prep)
        if pixels.shape[-1] != pixels.shape[-2]:
            raise ValueError(
                f"LLaVA-NeXT-Video needs square frames, preprocessing gave {tuple(pixels.shape[-2:])}; "
                f"set crop_size (and do_center_crop) in the model folder's preprocessor config"
            )
        return {"pixel_values_videos": pixels}

    def video_token_count(self, frame_inputs: dict[str, torch.Tensor], config: Any) -> int:
        """``F * ((S // patch) // stride) ** 2`` for pixel_values_videos of shape (F, 3, S, S)."""
        pixels = frame_inputs["pixel_values_videos"]
        if pixels.dim() != 4:
            raise ValueError(f"pixel_values_videos must be one sample (F, 3, S, S), got shape {tuple(pixels.shape)}")
        frames, _, height, width = pixels.shape
        vision = config.vision_config
        if (height, width) != (vision.image_size, vision.image_size):
            raise ValueError(
                f"frames are {height}x{width} but the vision tower takes {vision.image_size}x{vision.image_size}; "
                f"the preprocessor config's size/crop_size must match vision_config.image_size"
            )
        if getattr(config, "vision_feature_select_strategy", "default") != "default":
            # With the CLS token kept the pooler's square reshape fails inside the model.
            raise ValueError(
                f"vision_feature_select_strategy {config.vision_feature_select_strategy!r} is not supported "
                f"for videos by LlavaNextVideo (the pooler needs the CLS token dropped: 'default')"
            )
        grid = height // vision.patch_size
        pooled = grid // int(config.spatial_pool_stride)
        return int(frames) * pooled * pooled

    def step_inputs(self, inputs: dict[str, torch.Tensor], config: Any) -> dict[str, torch.Tensor]:
        """The padding mask as a 4D causal mask built on the device.

        Given a 2D mask, transformers asks on the host whether it has any padding (to use SDPA's
        ``is_causal``): a sync every step. A 4D mask is used as it is. Mistral's sliding window, when
        the checkpoint has one, is part of it.
        """
        return device_causal_mask(inputs, getattr(getattr(config, "text_config", config), "sliding_window", None))

    def collate_pixels(self, items: list[dict[str, torch.Tensor]]) -> dict[str, torch.Tensor]:
        """Stack samples to ``{"pixel_values_videos": (B, F, 3, S, S)}``.

        The model takes one tensor, so every clip in a batch needs the same frame count
        (sample a fixed number of frames per clip).
        """
        if not items:
            raise ValueError("collate_pixels needs at least one sample")
        shapes = {tuple(item["pixel_values_videos"].shape) for item in items}
        if len(shapes) != 1:
            raise ValueError(
                f"LLaVA-NeXT-Video batches need clips of equal shape (frames, 3, size, size), got {sorted(shapes)}; "
                f"sample the same number of frames from every clip"
            )
        return {"pixel_values_videos": torch.stack([item["pixel_values_videos"] for item in items])}
