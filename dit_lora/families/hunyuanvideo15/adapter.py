"""HunyuanVideo 1.5's model card: the usage snippet and its rows. The adapter is the kit's
(:class:`~dit_lora.kit.adapter.KitAdapter`): diffusers 0.42.1 has no LoRA loader for the
HunyuanVideo 1.5 pipelines (no ``load_lora_weights``), so the file is written by diffusers' own LoRA writer with
``transformer.`` keys and its PEFT config as metadata, and loads through the transformer's
``load_lora_adapter(..., prefix="transformer")`` (what the snippet calls, and ``dit_lora.load_adapter``)."""

from __future__ import annotations

import json
from typing import Any

from dit_lora.config import TrainConfig
from dit_lora.config.schema import FamilyOptions
from dit_lora.families.hunyuanvideo15.encoders import max_sequence_length
from dit_lora.families.hunyuanvideo15.model import tiled
from dit_lora.kit.adapter import SEED_ARGUMENT, KitAdapter, KitCard, Snippet, VideoCard, first_frame_line, quoted
from dit_lora.output.names import ADAPTER_FILE

#: the VAE the reloaded pipeline and the snippet decode with in fp32
HUNYUANVIDEO15_VAE = "AutoencoderKLHunyuanVideo15"


class HunyuanVideo15Adapter(KitAdapter):
    """``FamilySpec.adapter``: the kit's, the reloaded pipeline's VAE tiled as training's (:func:`~.model.tiled`)."""

    def fit_loaded(self, pipe, options: FamilyOptions) -> None:
        """The VAE in tiles, one clip at a time."""
        tiled(pipe.vae)


class HunyuanVideo15Card(VideoCard, KitCard):
    """``FamilySpec.card``: the usage snippet (the adapter through the transformer's ``load_lora_adapter``, the
    guidance scale through the pipeline's guider) and HunyuanVideo 1.5's rows."""

    def snippet(self, cfg: TrainConfig, repo_or_dir: str) -> Snippet:
        """The stock pipeline with the VAE in fp32, the adapter loaded into its transformer, one video at the trained
        size (image-to-video: the pipeline's size for the image)."""
        frames, height, width = self.task.video_buckets(cfg)[0]
        i2v = self.task.task == "i2v"
        guidance = cfg.validation.validation_guidance_scale
        load = (
            "# the HunyuanVideo 1.5 pipelines have no load_lora_weights: the adapter goes into the transformer\n"
            f"pipe.transformer.load_lora_adapter({json.dumps(repo_or_dir)}, weight_name={quoted(ADAPTER_FILE)}, "
            'prefix="transformer")\n'
        )
        return self.video_snippet(
            cfg,
            repo_or_dir,
            vae=HUNYUANVIDEO15_VAE,
            imports=[
                "from diffusers.guiders import ClassifierFreeGuidance\n",
                *(["from diffusers.utils import load_image\n"] if i2v else []),
            ],
            load=load,
            before_to="pipe.vae.enable_tiling()  # its attention spans a whole clip: tiles keep the decode in memory\n",
            before_call=f"pipe.guider = ClassifierFreeGuidance(guidance_scale={guidance})  # the call takes none\n"
            + (first_frame_line() if i2v else ""),
            call_args=[
                f"prompt={self.prompt(cfg.validation)},",
                *(["image=image,"] if i2v else [f"height={height}, width={width},"]),
                f"num_frames={frames}, num_inference_steps={cfg.validation.validation_inference_steps},",
                'output_type="pil",',
                SEED_ARGUMENT,
            ],
        )

    def card_settings(self, cfg: TrainConfig) -> dict[str, Any]:
        """The kit's video rows with the timestep density and the training shift, the caption length."""
        return self.video_rows(
            cfg,
            weighting_scheme=cfg.family_options.weighting_scheme,
            flow_shift=cfg.family_options.flow_shift or self.task.info(cfg.model).scheduler_shift,
            max_sequence_length=max_sequence_length(cfg.data),
        )
