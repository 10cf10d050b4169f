"""How much device memory captioning takes, before the model is loaded: the plan's answer for a captioner.

The model is built from its ``config.json`` on the meta device (the family's own plan builder, ``spec.plan``: a
local folder, or a catalogued Hub id from the catalogue's copy of its configs, no download), so the figures hold
for a 7B model on a machine that has never downloaded it:

* weights: every parameter and buffer in the load dtype, less what ``--quantize_base`` saves on the language
  model's Linears (the vision tower, projector and output head stay unquantized, as the family loads them);
* the key/value cache: per layer, keys and values of every token of the prompt (the video tokens the family's
  own preprocessing makes of ``--num_frames`` frames of ``--max_pixels`` each, 16:9, plus the prompt's text) and
  the caption, for the batch;
* the working memory of the prompt's pass: one layer's MLP and attention activations for the batch's tokens, and
  the last position's logits in fp32.

Weights and the cache are exact counts (tested against a loaded model and ``generate``'s cache); the working
memory is an estimate, and the CUDA context's few hundred MiB are added as :data:`CONTEXT_BYTES`.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from dit_lora.catalogue.defaults import config_reader
from dit_lora.config.schema import TrainConfig
from dit_lora.modeling import quantize
from dit_lora.plan.fake import module_bytes
from dit_lora.registry import get_spec

__all__ = ["CONTEXT_BYTES", "GIB_16", "gib", "PROMPT_TEXT_TOKENS", "CaptionMemory", "caption_memory"]

#: text tokens of a captioning prompt beside the video tokens (the chat template and a paragraph of instruction)
PROMPT_TEXT_TOKENS = 96
#: the (height, width) of the clip the video tokens are counted for without --max_pixels: a 720p clip (larger frames
#: take more)
CLIP_SIZE = (720, 1280)
#: a 16 GB card, as sold (GiB)
GIB_16 = 16 * 2**30
#: the CUDA context and the allocator's slack
CONTEXT_BYTES = 600 * 2**20


@dataclass(frozen=True)
class CaptionMemory:
    """The device memory a captioning batch takes, in bytes, and what it was figured for."""

    weights: int
    kv_cache: int
    working: int
    #: video tokens one file's frames make (the largest: a clip of --num_frames frames)
    video_tokens: int
    batch_size: int

    @property
    def total(self) -> int:
        """Everything, the CUDA context included."""
        return self.weights + self.kv_cache + self.working + CONTEXT_BYTES

    def line(self, gpu: bool = True) -> str:
        """``memory: about 9.1 GiB (weights 5.2 GiB, ...)``: what the run prints before loading (``gpu``: with the
        CUDA context, else without it)."""
        total = self.total if gpu else self.total - CONTEXT_BYTES
        context = f", CUDA context {gib(CONTEXT_BYTES)}" if gpu else ""
        return (
            f"memory: about {gib(total)} on the device (weights {gib(self.weights)}, key/value "
            f"cache {gib(self.kv_cache)} and working memory {gib(self.working)} for a batch of "
            f"{self.batch_size} at {self.video_tokens} video tokens a clip{context})"
        )


def gib(n: int) -> str:
    """``8.2 GiB`` (``512.0 MiB`` below one): device memory in the binary units cards are sold and reported in."""
    return f"{n / 2**30:.1f} GiB" if n >= 2**30 else f"{n / 2**20:.1f} MiB"


def _text_config(config):
    return getattr(config, "text_config", config)


def kv_cache_bytes(config, tokens: int, batch_size: int, dtype: torch.dtype) -> int:
    """Keys and values of ``tokens`` positions for ``batch_size`` sequences in every layer of the language model."""
    text = _text_config(config)
    heads = text.num_attention_heads
    kv_heads = getattr(text, "num_key_value_heads", None) or heads
    head_dim = getattr(text, "head_dim", None) or text.hidden_size // heads
    element = torch.empty((), dtype=dtype).element_size()
    return 2 * text.num_hidden_layers * kv_heads * head_dim * tokens * batch_size * element


def weight_bytes(model: torch.nn.Module, cfg: TrainConfig) -> int:
    """``model``'s parameters and buffers as the family loads it: in the load dtype, its language model's Linears
    quantized by ``--quantize_base``."""
    total = module_bytes(model)
    scheme = cfg.model.quantize_base
    if scheme in (None, "none"):
        return total
    precision = get_spec(cfg.model.family).precision
    assert precision is not None  # every video LLM states what --quantize_base leaves alone
    skip = precision.quantize_skip_modules()
    return total - quantize.quantized_weight_savings(model, scheme, quantize.quantized_linears(model, skip))


def caption_memory(cfg: TrainConfig, batch_size: int, max_new_tokens: int, max_pixels: int = 0) -> CaptionMemory:
    """The device memory captioning with ``cfg``'s model takes at ``batch_size`` files and ``max_new_tokens``, for
    clips of ``--num_frames`` frames of ``max_pixels`` pixels (16:9; 0, no limit: a 720p clip)."""
    spec = get_spec(cfg.model.family)
    assert spec.plan is not None  # every video LLM has a memory plan (its meta-device builder is used here)
    comps = spec.plan.plan_components(cfg, config_reader(cfg.model))
    model = comps.model
    video = _video_tokens(spec, cfg, model, clip_size(max_pixels))
    tokens = video + PROMPT_TEXT_TOKENS + max_new_tokens
    text = _text_config(model.config)
    element = torch.empty((), dtype=cfg.weight_dtype).element_size()
    prompt = batch_size * (video + PROMPT_TEXT_TOKENS)
    intermediate = getattr(text, "intermediate_size", 4 * text.hidden_size)
    working = prompt * (3 * intermediate + 4 * text.hidden_size) * element + batch_size * text.vocab_size * 4
    return CaptionMemory(
        weights=weight_bytes(model, cfg),
        kv_cache=kv_cache_bytes(model.config, tokens, batch_size, cfg.weight_dtype),
        working=working,
        video_tokens=video,
        batch_size=batch_size,
    )


def clip_size(max_pixels: int) -> tuple[int, int]:
    """The (height, width) of the 16:9 frame of ``max_pixels`` pixels (0: :data:`CLIP_SIZE`)."""
    if not max_pixels:
        return CLIP_SIZE
    height = max(1, int((max_pixels * 9 / 16) ** 0.5))
    return height, max(1, max_pixels // height)


def _video_tokens(spec, cfg: TrainConfig, model: torch.nn.Module, size: tuple[int, int]) -> int:
    """The video tokens the family's own preprocessing makes of ``--num_frames`` frames of ``size``."""
    frames = np.zeros((cfg.family_options.num_frames, *size, 3), dtype=np.uint8)
    arch = spec.plan.arch
    return int(
        arch.video_token_count(
            arch.frame_inputs(frames, spec.plan.preprocessing(cfg.model, model.config)), model.config
        )
    )
