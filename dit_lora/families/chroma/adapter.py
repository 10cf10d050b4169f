"""Chroma's model card: the usage snippet (the prompt encoded first and its masks passed as booleans: the stock
pipeline's own float mask does not mask the caption's padding, huggingface/diffusers#13619), its rows and the
license; the adapter is the kit's (:class:`~dit_lora.kit.adapter.KitAdapter`: ``ChromaPipeline``'s
saver, ``FluxLoraLoaderMixin``, reloaded in the run's weight dtype).

ComfyUI loads the diffusers file as it is: its ``Chroma`` model is a ``Flux`` model (``comfy/model_base.py``), so
``model_lora_keys_unet`` (``comfy/lora.py``) maps every diffusers name under ``transformer.`` through
``comfy.utils.flux_to_diffusers``, q/k/v (and the single blocks' ``proj_mlp``) as slices of the fused ``qkv`` /
``linear1``; no ComfyUI-named copy is written."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from dit_lora.families.chroma.encoders import max_sequence_length
from dit_lora.kit.adapter import KitCard

if TYPE_CHECKING:
    from dit_lora.config.schema import DataOptions, TrainConfig, ValidationOptions

#: the snippet's prompt encoding: the pipeline's own, its masks then made boolean as training used them
ENCODE = (
    "# ChromaPipeline passes its caption masks as floats, which attention adds instead of masking\n"
    "# (huggingface/diffusers#13619): encode first and pass them as booleans, as the adapter was trained\n"
    "embeds, _, mask, negative, _, negative_mask = pipe.encode_prompt(\n"
    '    {prompt}, negative_prompt="", device=pipe.device, max_sequence_length={length}\n'
    ")\n"
)


class ChromaCard(KitCard):
    """``FamilySpec.card``: the model card's snippet (the prompt encoded at the trained caption length with boolean
    masks, real CFG against the empty caption), Chroma's rows and the base model's license."""

    snippet_fields = {"to_comment": "  # or pipe.enable_model_cpu_offload()"}

    def prompt_args(self, data: DataOptions, validation: ValidationOptions) -> list[str]:
        """The encoded caption and the empty negative's, their masks boolean."""
        return [
            "prompt_embeds=embeds, prompt_attention_mask=mask.bool(),",
            "negative_prompt_embeds=negative, negative_prompt_attention_mask=negative_mask.bool(),",
        ]

    def snippet_parts(self, cfg: TrainConfig) -> dict[str, Any]:
        """The pipeline's own prompt encoding before the call."""
        return {"before_call": ENCODE.format(prompt=self.prompt(cfg.validation), length=max_sequence_length(cfg.data))}

    def card_settings(self, cfg: TrainConfig) -> dict[str, Any]:
        """The density, the shift, the caption length and the attention mask training used."""
        return {
            **self.flow_rows(cfg.family_options, "chroma_shift"),
            "max_sequence_length": max_sequence_length(cfg.data),
            "attention_mask": "boolean: the caption's tokens and its first padding token",
        }
