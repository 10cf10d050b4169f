"""FLUX.2's adapter: saved by the pipelines' own saver (``Flux2LoraLoaderMixin``, the base of ``Flux2Pipeline`` and
``Flux2KleinPipeline``), loaded back into the folder's stock pipeline, and the model card's snippet and rows."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import torch

from dit_lora.catalogue.defaults import config_reader
from dit_lora.contract.spec import FamilyInfo
from dit_lora.core.quiet import dtype_kwarg
from dit_lora.families.flux2.encoders import (
    DEFAULT_MAX_SEQUENCE_LENGTH,
    default_out_layers,
    max_sequence_length,
    out_layers,
    pipeline_class,
)
from dit_lora.families.flux2.model import folder_pipeline
from dit_lora.families.flux2.state import DEV_PIPELINE
from dit_lora.output.adapter import attach_adapter

#: licenses of black-forest-labs' checkpoints (their model cards): klein 4B Apache-2.0, the rest their own
_LICENSES = {"FLUX.2-klein-4B": "apache-2.0", "FLUX.2-klein-base-4B": "apache-2.0"}


class Flux2Adapter:
    """``FamilySpec.adapter``: ``save_lora_weights`` and ``load_lora_weights`` of the FLUX.2 pipelines."""

    def __init__(self, info: FamilyInfo) -> None:
        self.info = info

    def save_adapter(self, output_dir: Path, lora_state: dict, lora_config: dict) -> Path:
        """The transformer's LoRA layers and their PEFT config as diffusers' FLUX.2 LoRA file (``transformer.*``).

        Both pipelines inherit ``save_lora_weights`` from ``Flux2LoraLoaderMixin`` unchanged, so one saver writes
        the file either loads."""
        from diffusers.loaders import Flux2LoraLoaderMixin  # slow import: only when the adapter is saved

        Flux2LoraLoaderMixin.save_lora_weights(
            output_dir,
            transformer_lora_layers=lora_state,
            transformer_lora_adapter_metadata=lora_config,
            weight_name=self.info.adapter_weight_name,
            safe_serialization=True,
        )
        return Path(output_dir) / self.info.adapter_weight_name

    def load_pipeline_with_adapter(self, cfg, adapter_dir: Path, device: torch.device):
        """The folder's stock pipeline in the run's weight dtype (its VAE too, as diffusers' examples load it: the
        pipeline decodes in the transformer's dtype) with the saved adapter loaded by diffusers.

        The tokenizer is passed in as ``AutoTokenizer`` loads it: FLUX.2 [dev]'s folder names a ``PixtralProcessor``,
        which needs torchvision for images the pipeline's prompts never carry; its text half is the same tokenizer.
        """
        from transformers import AutoTokenizer  # heavy: only for the final samples

        path = cfg.model.pretrained_model_name_or_path
        tokenizer = AutoTokenizer.from_pretrained(path, subfolder="tokenizer", revision=cfg.model.revision)
        pipe = pipeline_class(folder_pipeline(cfg.model)).from_pretrained(
            path,
            tokenizer=tokenizer,
            revision=cfg.model.revision,
            variant=cfg.model.variant,
            **dtype_kwarg("diffusers", cfg.weight_dtype),
            use_safetensors=True,
        )
        attach_adapter(None, pipe, adapter_dir)  # FLUX.2 fits no consumer before the adapter loads
        pipe.set_progress_bar_config(disable=True)
        return pipe.to(device)


def _snippet_encoding(cfg, pipeline: str) -> str:
    """The call's prompt-encoding arguments where training's differ from the pipeline's defaults: the stacked text
    encoder layers (a reduced-depth encoder, such as the demo's, stacks its last layer instead: ``out_layers``) and
    ``--max_sequence_length``."""
    config = config_reader(cfg.model)("text_encoder", "config.json") or {}
    depth = (config.get("text_config") or config).get("num_hidden_layers")
    lines = ""
    if depth is not None and out_layers(pipeline, int(depth)) != default_out_layers(pipeline):
        layers = out_layers(pipeline, int(depth))
        lines += f"    text_encoder_out_layers={layers},  # the layers training stacked ({int(depth)}-layer encoder)\n"
    if max_sequence_length(cfg) != DEFAULT_MAX_SEQUENCE_LENGTH:
        lines += f"    max_sequence_length={max_sequence_length(cfg)},  # the caption length training used\n"
    return lines


class Flux2Card:
    """``FamilySpec.card``: the model card's snippet, FLUX.2's rows and the base model's license."""

    def usage_snippet(self, cfg, repo_or_dir: str) -> str:
        """The folder's pipeline with the adapter loaded, one image at the run's validation settings, its prompt
        encoded as training encoded it (the stacked layers and caption length when they are not the pipeline's)."""
        cls = folder_pipeline(cfg.model)
        encoding = _snippet_encoding(cfg, cls)
        # FLUX.2 [dev]'s tokenizer folder names a PixtralProcessor, which needs torchvision (for images the prompts
        # never carry): its text half is the tokenizer AutoTokenizer loads
        tokenizer = cls == DEV_PIPELINE
        return (
            "import torch\n"
            f"from diffusers import {cls}\n"
            + ("from transformers import AutoTokenizer\n" if tokenizer else "")
            + f"\nbase = {json.dumps(cfg.model.pretrained_model_name_or_path)}\n"
            + (
                'tokenizer = AutoTokenizer.from_pretrained(base, subfolder="tokenizer")  # no torchvision needed\n'
                if tokenizer
                else ""
            )
            + f"pipe = {cls}.from_pretrained(base, {'tokenizer=tokenizer, ' if tokenizer else ''}"
            "torch_dtype=torch.bfloat16)\n"
            f"pipe.load_lora_weights({json.dumps(repo_or_dir)})\n"
            'pipe.to("cuda" if torch.cuda.is_available() else "cpu")  # or pipe.enable_model_cpu_offload()\n'
            f"image = pipe(\n    prompt={json.dumps(cfg.validation.validation_prompt or 'a photo')},\n"
            f"    height={cfg.data.resolution}, width={cfg.data.resolution},\n"
            f"    num_inference_steps={cfg.validation.validation_inference_steps}, guidance_scale={cfg.validation.validation_guidance_scale},\n"
            f"{encoding}"
            "    generator=torch.manual_seed(0),\n"
            ").images[0]\n"
            'image.save("sample.png")\n'
        )

    def card_settings(self, cfg) -> dict[str, Any]:
        """The density, the shift, the training guidance and the caption length."""
        options = cfg.family_options
        return {
            "weighting_scheme": options.weighting_scheme,
            "flux2_shift": options.flux2_shift if options.flux2_shift is not None else "dynamic",
            "flux2_train_guidance": options.flux2_train_guidance,
            "max_sequence_length": max_sequence_length(cfg),
        }

    def base_model_license(self, cfg) -> str | None:
        """Apache-2.0 for the klein 4B models; black-forest-labs' own license ("other") for dev and klein 9B."""
        name = str(cfg.model.pretrained_model_name_or_path)
        if not name.startswith("black-forest-labs/"):
            return None
        return _LICENSES.get(name.split("/", 1)[1], "other")
