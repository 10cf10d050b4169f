"""SANA-Video's model card: the usage snippet (the Wan VAE in fp32), its rows and the license; the adapter is the
kit's (:class:`~dit_lora.families.diffusion.adapter.KitAdapter`: ``save_lora_weights`` of diffusers'
``SanaLoraLoaderMixin``, the stock pipeline of the base model reloaded with the Wan VAE in fp32)."""

from __future__ import annotations

import json
from typing import Any

from dit_lora.config import TrainConfig
from dit_lora.data.frames import describe_buckets
from dit_lora.families.diffusion.adapter import KitCard, Snippet, image_call_args
from dit_lora.families.sanavideo.encoders import max_sequence_length
from dit_lora.families.sanavideo.info import SanaVideoTask
from dit_lora.families.sanavideo.model import training_shift
from dit_lora.output.video import snippet_write_video

#: the VAE SANA-Video decodes in fp32 (the reloaded pipeline's and the snippet's)
SANA_VIDEO_VAE = "AutoencoderKLWan"


class SanaVideoCard(KitCard):
    """``FamilySpec.card``: the usage snippet, SANA-Video's rows and the license of Efficient-Large-Model's release."""

    placeholder_prompt = "a video"

    def __init__(self, task: SanaVideoTask) -> None:  # the task names the pipeline: no info (KitCard's default unused)
        self.task = task

    def snippet(self, cfg: TrainConfig, repo_or_dir: str) -> Snippet:
        """The stock pipeline with the Wan VAE in fp32, the adapter loaded, one video at the trained size."""
        frames, height, width = self.task.video_buckets(cfg)[0]
        i2v = self.task.task == "i2v"
        image_src = getattr(cfg.family_options, "validation_image", None) or "first_frame.png"
        chi = cfg.family_options.complex_human_instruction
        return Snippet(
            pipeline=self.task.pipeline_class_name,
            base=cfg.model.pretrained_model_name_or_path or "",  # set: the parser requires it
            repo=repo_or_dir,
            base_name="model_id",
            vae=SANA_VIDEO_VAE,
            imports=["from diffusers.utils import load_image\n"] if i2v else [],
            before_call=f"image = load_image({json.dumps(image_src)})  # the first frame to animate\n" if i2v else "",
            output="video",
            call_args=[
                f"prompt={self.prompt(cfg)},",
                *(["image=image,"] if i2v else []),
                *([] if chi else ["complex_human_instruction=None,"]),
                *max_sequence_length.snippet_args(cfg),
                f"frames={frames}, height={height}, width={width},",
                *image_call_args(cfg)[1:],
                "use_resolution_binning=False,  # the trained size, not the 480p table's nearest",
            ],
            tail=snippet_write_video(self.task.model_fps(cfg)),
        )

    def card_settings(self, cfg: TrainConfig) -> dict[str, Any]:
        """The buckets, the model, the timestep density and the training shift, the instruction prefix, the caption
        length."""
        buckets = describe_buckets(self.task.video_buckets(cfg), automatic=not cfg.video.frame_buckets)
        return {
            "resolution": f"{buckets} (frames x height x width)",
            "model": self.task.info(cfg).describe(),
            "weighting_scheme": cfg.family_options.weighting_scheme,
            "flow_shift": training_shift(cfg),
            "complex_human_instruction": cfg.family_options.complex_human_instruction,
            "max_sequence_length": max_sequence_length(cfg),
            "frame_sampling": cfg.video.frame_sampling,
        }
