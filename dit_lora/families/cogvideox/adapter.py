"""CogVideoX's adapter: saved by the pipeline's own saver (``CogVideoXLoraLoaderMixin``, shared by both tasks),
loaded back into the pipeline, and the model card's usage snippet, rows and license."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, cast

from dit_lora.contract.spec import FamilyInfo
from dit_lora.data.frames import describe_buckets
from dit_lora.families.cogvideox.info import CogVideoXVideo
from dit_lora.kit.adapter import KitAdapter, KitCard, Snippet, image_call_args, image_lines
from dit_lora.output.video import snippet_write_video

if TYPE_CHECKING:
    from dit_lora.config.schema import FamilyOptions, TrainConfig
    from dit_lora.families.cogvideox.options import CogVideoXOptions


class CogVideoXAdapter(KitAdapter):
    """``FamilySpec.adapter``: the pipeline's ``save_lora_weights`` and ``load_lora_weights``, the reloaded
    pipeline in the run's dtype (its VAE too) with the run's VAE slicing and tiling."""

    def fit_loaded(self, pipe, options: FamilyOptions) -> None:
        """``--enable_slicing`` and ``--enable_tiling`` on the reloaded pipeline's VAE."""
        vae_options = cast("CogVideoXOptions", options)
        if vae_options.enable_slicing:
            pipe.vae.enable_slicing()
        if vae_options.enable_tiling:
            pipe.vae.enable_tiling()


class CogVideoXCard(KitCard):
    """``FamilySpec.card``: the snippet (text-to-video; ``i2v.py`` adds the image), the video rows, the license."""

    placeholder_prompt = "a video"

    def __init__(self, info: FamilyInfo, video: CogVideoXVideo) -> None:
        super().__init__(info)
        self.video = video

    def snippet_image(self) -> tuple[str, str, str]:
        """(extra import, lines before the call, argument) for the snippet's conditioning image (none here)."""
        return "", "", ""

    def snippet(self, cfg: TrainConfig, repo_or_dir: str) -> Snippet:
        """The pipeline with the adapter loaded, one video of the run's first bucket, written as MP4."""
        frames, height, width = self.video.video_buckets(cfg)[0]
        extra_import, before, image_arg = self.snippet_image()
        imports, image = image_lines(extra_import, image_arg)
        tiling = "pipe.vae.enable_tiling()  # decode in tiles: much less memory\n"
        return Snippet(
            pipeline=self.info.pipeline_class_name,
            base=cfg.model.path,
            repo=repo_or_dir,
            base_name=None,
            imports=imports,
            before_to=tiling if cfg.family_options.enable_tiling else "",
            before_call=before,
            output="video",
            call_args=[
                f"prompt={self.prompt(cfg.validation)},",
                *image,
                f"num_frames={frames}, height={height}, width={width},",
                *image_call_args(cfg.data, cfg.validation)[1:],
            ],
            tail=snippet_write_video(self.video.model_info(cfg.model).fps),
        )

    def card_settings(self, cfg: TrainConfig) -> dict[str, Any]:
        """The buckets, the version, the loss settings, the text length, frame sampling and the VAE's modes."""
        options = cfg.family_options
        buckets = describe_buckets(self.video.video_buckets(cfg), automatic=not cfg.video.frame_buckets)
        info = self.video.model_info(cfg.model)
        return {
            "resolution": f"{buckets} (frames x height x width)",  # replaces the image row
            "model": info.describe(),
            "timestep_sampling": options.timestep_sampling,
            "loss_weight_cap": (
                options.loss_weight_cap if options.loss_weight_cap is not None else "none (1/(1 - alpha_bar_t))"
            ),
            "max_sequence_length": info.max_text_seq_length,
            "frame_sampling": cfg.video.frame_sampling,
            "vae": f"tiling {'on' if options.enable_tiling else 'off'}, "
            f"slicing {'on' if options.enable_slicing else 'off'}",
        }
