"""PixArt-alpha (``PixArtAlphaPipeline``), a family outside the package: its spec from the kit's :func:`diffusion_spec`.
The pipeline has no LoRA loader and its transformer no PEFT mixin: the adapter file is PEFT's (the kit saves PEFT's
format, its card loads it with ``dit_lora.load_adapter``), the consumer is fitted with PEFT's methods. Its sizes are
the run's, never PixArt's table (``use_resolution_binning=False``)."""

from __future__ import annotations

from typing import Any

from dit_lora.contract.spec import FamilyInfo, FamilySpec
from dit_lora.kit.adapter import KitAdapter, KitCard, image_call_args
from dit_lora.kit.builder import diffusion_spec
from dit_lora.kit.components import PipelineSamples, ShapesDemo
from dit_lora.kit.peft_capable import PeftFitting
from dit_lora.output.names import PEFT_ADAPTER_FILE

from .demo import RESOLUTION, build_tiny_pixart_pipeline
from .encoders import NAME, PixArtEncoders, PixArtLoss
from .model import GRID, PARTS, PixArtModel, PixArtPlan
from .options import options_text_length, text_length

INFO = FamilyInfo(pipeline_class_name="PixArtAlphaPipeline", block_lists=("transformer_blocks",),
                  card_tags=("text-to-image", "diffusers", "pixart", "diffusers-training"), text_encoder_label="T5",
                  default_lora_layers=("to_q", "to_k", "to_v", "to_out.0"), adapter_weight_name=PEFT_ADAPTER_FILE)


class PixArtCard(KitCard):
    """``FamilySpec.card``: the kit's snippet without resolution binning, the family's rows, no license."""

    def call_args(self, cfg) -> list[str]:
        return [f"prompt={self.prompt(cfg.validation)},", "use_resolution_binning=False,", *image_call_args(cfg.data, cfg.validation)]

    def card_settings(self, cfg) -> dict[str, Any]:
        return {"pixart_text_length": text_length(cfg), "loss": "epsilon (DDPM)"}


class PixArtSamples(PipelineSamples):
    """``FamilySpec.samples``: the cached negative embeddings, or the prompt's tokens cut as training's were."""

    pipeline = INFO.pipeline_class_name

    def call_kwargs(self, options, cached: bool) -> dict[str, Any]:
        if cached:
            return {"use_resolution_binning": False, "negative_prompt": None}
        length = options_text_length(options)
        return {"use_resolution_binning": False, "clean_caption": False, "max_sequence_length": length}


def pixart_spec() -> FamilySpec:
    """A new spec of text-to-image PixArt-alpha (tiny random variants built by :mod:`.demo`)."""
    fitting = PeftFitting()
    return diffusion_spec(NAME, INFO, model=PixArtModel(INFO), encoders=PixArtEncoders(), loss=PixArtLoss,
                          samples=PixArtSamples, plan=PixArtPlan, image_buckets=GRID, defaults=GRID,
                          adapter=KitAdapter(INFO, fp32_vae="AutoencoderKL", fitting=fitting), fitting=fitting,
                          card=PixArtCard(INFO), precision=PARTS.precision,
                          # the shapes at RESOLUTION: --resolution is set after the demo is prepared
                          demo=ShapesDemo(lambda cfg: build_tiny_pixart_pipeline(cfg.model.path), RESOLUTION))
