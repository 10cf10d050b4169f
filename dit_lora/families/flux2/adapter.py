"""FLUX.2's adapter: saved by the pipelines' own saver (``Flux2LoraLoaderMixin``, the base of ``Flux2Pipeline`` and
``Flux2KleinPipeline``), loaded back into the folder's stock pipeline, and the model card's snippet and rows."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from dit_lora.catalogue.defaults import config_reader
from dit_lora.families.flux2.encoders import default_out_layers, max_sequence_length, out_layers
from dit_lora.families.flux2.state import DEV_PIPELINE
from dit_lora.kit.adapter import KitAdapter, KitCard
from dit_lora.kit.loader import folder_pipeline

if TYPE_CHECKING:
    from dit_lora.config.schema import DataOptions, ModelOptions, TrainConfig


class Flux2Adapter(KitAdapter):
    """``FamilySpec.adapter``: ``save_lora_weights`` and ``load_lora_weights`` of the FLUX.2 pipelines.

    Both pipelines inherit ``save_lora_weights`` from ``Flux2LoraLoaderMixin`` unchanged, so one saver writes the
    file either loads (``transformer.*``). The reload is the folder's stock pipeline in the run's weight dtype (its
    VAE too, as diffusers' examples load it: the pipeline decodes in the transformer's dtype)."""

    def pipeline_parts(self, cfg: TrainConfig, common: dict[str, Any]) -> dict[str, Any]:
        """The tokenizer as ``AutoTokenizer`` loads it: FLUX.2 [dev]'s folder names a ``PixtralProcessor``, which
        needs torchvision for images the pipeline's prompts never carry; its text half is the same tokenizer."""
        from transformers import AutoTokenizer  # heavy: only for the final samples

        path = cfg.model.pretrained_model_name_or_path
        return {"tokenizer": AutoTokenizer.from_pretrained(path, subfolder="tokenizer", revision=cfg.model.revision)}


def _snippet_encoding(model: ModelOptions, data: DataOptions, pipeline: str) -> list[str]:
    """The call's prompt-encoding arguments where training's differ from the pipeline's defaults: the stacked text
    encoder layers (a reduced-depth encoder, such as the demo's, stacks its last layer instead: ``out_layers``) and
    ``--max_sequence_length`` (``model``, ``data``: the run's ``cfg.model`` and ``cfg.data``)."""
    config = config_reader(model)("text_encoder", "config.json") or {}
    depth = (config.get("text_config") or config).get("num_hidden_layers")
    lines = []
    if depth is not None and out_layers(pipeline, int(depth)) != default_out_layers(pipeline):
        layers = out_layers(pipeline, int(depth))
        lines.append(f"text_encoder_out_layers={layers},  # the layers training stacked ({int(depth)}-layer encoder)")
    return [*lines, *max_sequence_length.snippet_args(data)]


class Flux2Card(KitCard):
    """``FamilySpec.card``: the model card's snippet (the folder's pipeline, its prompt encoded as training encoded
    it), FLUX.2's rows and the base model's license."""

    snippet_fields = {"to_comment": "  # or pipe.enable_model_cpu_offload()"}

    def extra_call_args(self, cfg: TrainConfig) -> list[str]:
        """The stacked layers and caption length, where they are not the pipeline's."""
        return _snippet_encoding(cfg.model, cfg.data, folder_pipeline(cfg.model, self.info.pipeline_classes))

    def snippet_parts(self, cfg: TrainConfig) -> dict[str, Any]:
        """The folder's own pipeline class; FLUX.2 [dev]'s tokenizer folder names a PixtralProcessor, which needs
        torchvision (for images the prompts never carry): its text half is the tokenizer AutoTokenizer loads."""
        cls = folder_pipeline(cfg.model, self.info.pipeline_classes)
        if cls != DEV_PIPELINE:
            return {"pipeline": cls}
        return {
            "pipeline": cls,
            "imports": ["from transformers import AutoTokenizer\n"],
            "before_pipe": 'tokenizer = AutoTokenizer.from_pretrained(base, subfolder="tokenizer")  # no torchvision needed\n',
            "pipe_kwargs": "tokenizer=tokenizer, ",
        }

    def card_settings(self, cfg: TrainConfig) -> dict[str, Any]:
        """The density, the shift, the training guidance and the caption length."""
        return {
            **self.flow_rows(cfg.family_options, "flux2_shift", unset="dynamic"),
            "flux2_train_guidance": cfg.family_options.flux2_train_guidance,
            "max_sequence_length": max_sequence_length(cfg.data),
        }
