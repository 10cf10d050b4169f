"""LTX-2's model card: the usage snippet (the clip and its sound written with diffusers' ``encode_video``), its rows
and the license; the adapter is the kit's (:class:`~dit_lora.kit.adapter.KitAdapter`:
``save_lora_weights`` of diffusers' ``LTX2LoraLoaderMixin``, the stock pipeline reloaded with the video VAE in fp32)."""

from __future__ import annotations

import json
from typing import Any

from dit_lora.config import TrainConfig
from dit_lora.families.ltx2.encoders import max_sequence_length
from dit_lora.kit.adapter import KitCard, Snippet, VideoCard, first_frame_line, image_call_args

#: the VAE LTX-2 decodes in fp32 (the reloaded pipeline's and the snippet's)
LTX2_VAE = "AutoencoderKLLTX2Video"
#: the in-context snippet's imports: the reference condition and diffusers' clip reader
IC_IMPORTS = [
    "from diffusers.pipelines.ltx2.pipeline_ltx2_ic_lora import LTX2ReferenceCondition\n",
    "import av  # PyAV reads the reference clip (diffusers' load_video needs imageio)\n",
]


class LTX2Card(VideoCard, KitCard):
    """``FamilySpec.card``: the usage snippet, LTX-2's rows and the license of Lightricks' release."""

    def snippet(self, cfg: TrainConfig, repo_or_dir: str) -> Snippet:
        """The stock pipeline with the video VAE in fp32, the adapter loaded, one clip with its sound at the trained
        size and the model's frame rate."""
        frames, height, width = self.task.video_buckets(cfg)[0]
        fps = self.task.model_fps(cfg.model)
        i2v, ic = self.task.task == "i2v", self.task.task == "ic"
        reference_src = getattr(cfg.family_options, "validation_reference", None) or "reference.mp4"
        factor = getattr(cfg.family_options, "reference_downscale_factor", 1)
        return self.video_snippet(
            cfg,
            repo_or_dir,
            vae=None if i2v else LTX2_VAE,  # image-to-video encodes its image in the pipeline's dtype
            imports=[
                "from diffusers.utils import encode_video  # PyAV: the frames and their sound\n",
                *(["from diffusers.utils import load_image\n"] if i2v else []),
                *(IC_IMPORTS if ic else []),
            ],
            before_call=(
                first_frame_line()
                if i2v
                else f"with av.open({json.dumps(reference_src)}) as clip:  # the reference clip, its frames\n"
                "    frames = [frame.to_image() for frame in clip.decode(video=0)]\n"
                "reference = LTX2ReferenceCondition(frames=frames)\n"
                if ic
                else ""
            ),
            output="result",  # the frames and their sound (the tail writes both)
            call_args=[
                f"prompt={self.prompt(cfg.validation)},",
                *(["image=image,"] if i2v else []),
                *([f"reference_conditions=[reference], reference_downscale_factor={factor},"] if ic else []),
                *max_sequence_length.snippet_args(cfg.data),
                f"num_frames={frames}, height={height}, width={width}, frame_rate={fps:g},",
                *image_call_args(cfg.data, cfg.validation)[1:],
            ],
            tail=(
                "video, audio = result.frames[0], result.audio[0]  # the frames and their sound\n"
                f'encode_video(video, fps={fps:g}, output_path="sample.mp4", audio=audio.float().cpu(),\n'
                "             audio_sample_rate=pipe.vocoder.config.output_sampling_rate)\n"
            ),
        )

    def card_settings(self, cfg: TrainConfig) -> dict[str, Any]:
        """The buckets, the model, the sound and its loss weight, the caption length, the frame sampling."""
        rows = self.video_rows(
            cfg,
            timesteps="shifted, stretched logit-normal (Lightricks' LTX-2 trainer)",
            audio=cfg.family_options.audio,
            audio_loss_weight=cfg.family_options.audio_loss_weight,
            max_sequence_length=max_sequence_length(cfg.data),
        )
        return {
            **rows,
            "first_frame_conditioning_p": getattr(cfg.family_options, "first_frame_conditioning_p", 1.0),
            **(
                {"reference_downscale_factor": cfg.family_options.reference_downscale_factor}
                if self.task.task == "ic"
                else {}
            ),
        }
