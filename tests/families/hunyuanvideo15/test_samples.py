"""families/hunyuanvideo15/samples.py: the call's arguments (no guidance_scale: the guider's; no size for
image-to-video, which the pipeline sizes from its image)."""

from __future__ import annotations

import torch

from dit_lora.config import TrainConfig
from dit_lora.families.hunyuanvideo15.samples import guider
from dit_lora.registry import get_spec


def test_the_call_leaves_guidance_to_the_guider_and_image_to_video_sizes_itself():
    for family, sized in (("hunyuanvideo15", True), ("hunyuanvideo15_i2v", False)):
        cfg = TrainConfig.for_family(
            family, pretrained_model_name_or_path="hunyuanvideo-community/HunyuanVideo-1.5-Diffusers-480p_t2v",
            max_num_frames=9, height=64, width=64, validation_guidance_scale=4.0,
        )  # fmt: skip
        kwargs = get_spec(family).samples.call_kwargs(cfg, torch.Generator(), 1)
        assert "guidance_scale" not in kwargs and ("height" in kwargs) == sized and kwargs["num_frames"] == 9
        assert guider(cfg.validation).guidance_scale == 4.0
