"""The diffusers family kit's prompt encoding: captions through the family's own diffusers pipeline, built with only
the run's tokenizer and text encoder, so that training prompts are exactly what that pipeline feeds the transformer
at inference (its template, instruction prefix, truncation, token selection and padding).

A family states only what differs: its pipeline class, what its ``encode_prompt`` returns (the embeddings alone, or
with their attention mask), its negative prompt and its own keywords (the caption length, an instruction prefix:
:func:`default_instruction` reads a pipeline's own).
"""

from __future__ import annotations

import inspect
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import torch

from dit_lora.contract.capabilities import TextSettings
from dit_lora.contract.family import Components
from dit_lora.kit.loader import model_class

if TYPE_CHECKING:
    from dit_lora.config.schema import DataOptions

#: what an ``encode_prompt`` returns for the captions (then the same for the negative), by what a family caches
EMBEDS = ("prompt_embeds",)
MASKED = ("prompt_embeds", "prompt_attention_mask")


def text_pipeline(comps: Components, pipeline: str, also: tuple[str, ...] = ()) -> Any:
    """The diffusers pipeline ``pipeline`` (its class name) holding only the run's tokenizer and text encoder (and the
    further components ``also`` names: FLUX.1's ``tokenizer_2``, ``text_encoder_2``): its ``encode_prompt`` is what
    the pipeline feeds the transformer (``Any``: mypy takes diffusers' top-level classes for the dummy placeholders
    its ``__init__`` imports first)."""
    return model_class("diffusers", pipeline)(
        tokenizer=comps.encoders["tokenizer"],
        text_encoder=comps.encoders["text_encoder"],
        **{name: comps.encoders[name] for name in also},
        vae=None,
        transformer=None,
        scheduler=None,
    )


def caption_length(text: TextSettings | None, default: int) -> int:
    """The caption length the run's text settings record (``default`` before they are recorded)."""
    return text.max_sequence_length if text else default


@dataclass(frozen=True)
class CaptionLength:
    """A pipeline's caption length, its ``encode_prompt``'s ``max_sequence_length``: called with the run's data
    options (``cfg.data``), ``--max_sequence_length``, else the pipeline's ``default``."""

    #: the pipeline's default ``max_sequence_length``
    default: int

    def __call__(self, data: DataOptions) -> int:
        """``--max_sequence_length``, else :attr:`default`."""
        return data.max_sequence_length or self.default

    def settings(self, data: DataOptions) -> TextSettings:
        """The run's text settings of a family whose captions have only a length (no instruction)."""
        return TextSettings(max_sequence_length=self(data))

    def snippet_args(self, data: DataOptions) -> list[str]:
        """The model card snippet's call argument for the run's caption length, when it is not the pipeline's own
        (the consumer then encodes its prompts as training did); none when it is."""
        if self(data) == self.default:
            return []
        return [f"max_sequence_length={self(data)},  # the caption length training used"]

    def recorded(self, text: TextSettings | None) -> int:
        """:func:`caption_length` of the run's text settings (:attr:`default` before they are recorded)."""
        return caption_length(text, self.default)


def instruction(text: TextSettings | None) -> list[str] | None:
    """The instruction prefix the run's text settings record, as a pipeline's ``complex_human_instruction`` takes
    it (None: none, or no settings recorded yet)."""
    return list(text.instruction) if text and text.instruction else None


def default_instruction(pipeline: str) -> tuple[str, ...]:
    """The complex human instruction ``pipeline`` (its diffusers class name) prefixes captions with by default at
    inference, read from the installed pipeline's signature (so it follows diffusers' default; imported on use:
    diffusers' pipelines import slowly)."""
    call = model_class("diffusers", pipeline).__call__
    return tuple(inspect.signature(call).parameters["complex_human_instruction"].default)


def pipeline_prompts(
    comps: Components,
    pipeline: str,
    captions: list[str],
    *,
    with_negative: bool,
    keys: tuple[str, ...] = EMBEDS,
    negative: str | None = "",
    **kwargs: Any,
) -> dict[str, Any]:
    """Captions through ``pipeline``'s own ``encode_prompt`` on the text encoder's device, the ``negative`` prompt
    (``""``; None: the pipeline's own default) encoded too with ``with_negative``: what it returns for the captions
    under ``keys``, then the negative's under ``negative_`` + each key; ``kwargs``: the family's other keywords."""
    pipe = text_pipeline(comps, pipeline)
    with torch.no_grad():
        result = pipe.encode_prompt(
            list(captions),
            negative_prompt=negative,
            do_classifier_free_guidance=with_negative,
            device=comps.encoders["text_encoder"].device,
            **kwargs,
        )
    out = dict(zip(keys, result[: len(keys)]))
    if with_negative:
        out.update(zip((f"negative_{key}" for key in keys), result[len(keys) :]))
    return out
