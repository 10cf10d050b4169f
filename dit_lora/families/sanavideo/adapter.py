"""SANA-Video's model card: the usage snippet (the Wan VAE in fp32), its rows and the license; the adapter is the
kit's (:class:`~dit_lora.kit.adapter.KitAdapter`: ``save_lora_weights`` of diffusers'
``SanaLoraLoaderMixin``, the stock pipeline of the base model reloaded with the Wan VAE in fp32)."""

from __future__ import annotations

from typing import Any

from dit_lora.config import TrainConfig
from dit_lora.families.sanavideo.encoders import max_sequence_length
from dit_lora.families.sanavideo.model import training_shift
from dit_lora.kit.adapter import KitCard, Snippet, VideoCard, first_frame_line, image_call_args

#: the VAE SANA-Video decodes in fp32 (the reloaded pipeline's and the snippet's)
SANA_VIDEO_VAE = "AutoencoderKLWan"


class SanaVideoCard(VideoCard, KitCard):
    """``FamilySpec.card``: the usage snippet, SANA-Video's rows and the license of Efficient-Large-Model's release."""

    def snippet(self, cfg: TrainConfig, repo_or_dir: str) -> Snippet:
        """The stock pipeline with the Wan VAE in fp32, the adapter loaded, one video at the trained size."""
        frames, height, width = self.task.video_buckets(cfg)[0]
        i2v = self.task.task == "i2v"
        chi = cfg.family_options.complex_human_instruction
        return self.video_snippet(
            cfg,
            repo_or_dir,
            vae=SANA_VIDEO_VAE,
            imports=["from diffusers.utils import load_image\n"] if i2v else [],
            before_call=first_frame_line() if i2v else "",
            call_args=[
                f"prompt={self.prompt(cfg.validation)},",
                *(["image=image,"] if i2v else []),
                *([] if chi else ["complex_human_instruction=None,"]),
                *max_sequence_length.snippet_args(cfg.data),
                f"frames={frames}, height={height}, width={width},",
                *image_call_args(cfg.data, cfg.validation)[1:],
                "use_resolution_binning=False,  # the trained size, not the 480p table's nearest",
            ],
        )

    def card_settings(self, cfg: TrainConfig) -> dict[str, Any]:
        """The kit's video rows with the timestep density and the training shift, the instruction prefix, the caption
        length."""
        return self.video_rows(
            cfg,
            weighting_scheme=cfg.family_options.weighting_scheme,
            flow_shift=training_shift(cfg),
            complex_human_instruction=cfg.family_options.complex_human_instruction,
            max_sequence_length=max_sequence_length(cfg.data),
        )
