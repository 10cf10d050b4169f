"""A tiny, randomly initialised LLaVA-NeXT-Video model built locally (no Hub access needed).

:func:`build_tiny_llava_next_video` writes a folder shaped like the real
``llava-hf/LLaVA-NeXT-Video-7B-hf`` repo: ``config.json`` + ``model.safetensors`` (bf16,
``LlavaNextVideoForConditionalGeneration.save_pretrained``), a fast tokenizer
(``tokenizer.json``, ``tokenizer_config.json``, ``chat_template.jinja``) with ``<video>`` and
``<image>`` tokens, and ``preprocessor_config.json`` / ``video_preprocessor_config.json`` with
CLIP mean/std.  Code written against the real model loads it the same way, offline, and the
module names LoRA targets (``model.language_model.layers.N.self_attn.q_proj`` ...) are the
real ones.

Only sizes shrink: a CLIP vision tower at 32 px with 8 px patches (a 4 x 4 patch grid, which
the video pooler's stride 2 averages to 2 x 2 = 4 video tokens per frame; the real model has
336 px / 14 px -> 24 x 24 -> 144 per frame) and a 2-layer Mistral language model (grouped-
query attention, 4 query / 2 key-value heads).  About 0.2M parameters, so CPU training of a
few dozen steps takes seconds.

The tokenizer is a byte-level BPE (any text encodes, decoding round-trips exactly) trained
on the demo's questions and answers, so their words are single tokens.  Its chat template
is Mistral-instruct style (``<s>[INST] question [/INST] answer</s>``); a system message is
prepended to the first user turn, and list content renders ``{"type": "video"}`` as
``<video>\\n`` like the real LLaVA-NeXT-Video template.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch

from dit_lora.data.synthetic import build_directory_atomically
from dit_lora.data.synthetic.clips import CLIP_COLORS, DIRECTIONS
from dit_lora.families.videollm.demo_common import TINY_MARKER, TINY_TEXT_SIZES, save_tiny_folder, seeded_model
from dit_lora.kit.demo_file import DemoFile

__all__ = [
    "TINY_VIDEOCHAT_VERSION",
    "TINY_VIDEOCHAT_CHAT_TEMPLATE",
    "build_tiny_llava_next_video",
    "build_tiny_videollm_model",
    "build_tiny_videollm_tokenizer",
    "get_tiny_videollm_config",
    "tokenizer_corpus",
]

#: the vision tower's, the language model's (beyond :data:`TINY_TEXT_SIZES`), the multimodal and the preprocessor's
#: configs, and their reasons: ``demo_llava.json`` beside this module
DEMO = DemoFile(__name__, keys=("vision", "text", "multimodal", "preprocessor"), filename="demo_llava.json")
TINY_VIDEOCHAT_VERSION = DEMO.read().version  # bump the file's when configs, init, tokenizer or template change

# Mistral-instruct layout.  The system prompt is carried (namespace) into the first user turn
# so that rendering more turns only appends text, which answer-only labelling relies on.
TINY_VIDEOCHAT_CHAT_TEMPLATE = r"""{{- bos_token -}}
{%- set ns = namespace(system='', text='') -%}
{%- for message in messages -%}
{%- if message['content'] is string -%}
{%- set ns.text = message['content'] -%}
{%- else -%}
{%- set ns.text = '' -%}
{%- for part in message['content'] -%}
{%- if part['type'] == 'video' -%}{%- set ns.text = ns.text + '<video>\n' -%}
{%- elif part['type'] == 'image' -%}{%- set ns.text = ns.text + '<image>\n' -%}
{%- elif part['type'] == 'text' -%}{%- set ns.text = ns.text + part['text'] -%}
{%- endif -%}
{%- endfor -%}
{%- endif -%}
{%- if message['role'] == 'system' -%}
{%- set ns.system = ns.text + '\n\n' -%}
{%- elif message['role'] == 'user' -%}
{{- '[INST] ' + ns.system + ns.text + ' [/INST]' -}}
{%- set ns.system = '' -%}
{%- elif message['role'] == 'assistant' -%}
{{- ' ' + ns.text + eos_token -}}
{%- else -%}
{{- raise_exception('Only system, user and assistant roles are supported') -}}
{%- endif -%}
{%- endfor -%}"""

# Ids 0..4 like Mistral (unk, bos, eos, then the [INST] control tokens of v0.3); the multimodal
# and pad tokens come last, as llava-hf appended them to the Llama/Mistral vocabularies.
_LEADING_SPECIAL = ("<unk>", "<s>", "</s>", "[INST]", "[/INST]")
_TRAILING_SPECIAL = ("<video>", "<image>", "<pad>")


def get_tiny_videollm_config() -> dict[str, Any]:
    """Return fresh copies of the config dicts.

    Keys: ``vision`` (CLIPVisionConfig kwargs), ``text`` (MistralConfig kwargs, without
    ``vocab_size`` and the special token ids, filled in from the tokenizer at build time),
    ``multimodal`` (the remaining LlavaNextVideoConfig kwargs), ``preprocessor`` (the
    preprocessor JSON) and ``chat_template``.
    """
    config = DEMO.read().variant("tiny")
    config["text"] = {**TINY_TEXT_SIZES, **config["text"]}
    return {**config, "chat_template": TINY_VIDEOCHAT_CHAT_TEMPLATE}


# --------------------------------------------------------------------------------------
# Tokenizer
# --------------------------------------------------------------------------------------
def tokenizer_corpus() -> list[str]:
    """Sentences the BPE merges are trained on: the demo's questions and answers.

    Built from the moving-square clips' colours and directions so every word of a demo
    question or answer is one token; other text still encodes byte by byte.
    """

    colours = sorted(CLIP_COLORS) + ["orange", "purple", "white", "black", "gray", "pink"]
    questions = [
        "What colour is the square?",
        "What color is the square?",
        "Which colour is the moving square?",
        "Which way does the square move?",
        "In which direction does the square move?",
        "Where does the square go?",
        "How does the square move?",
        "Describe the video.",
        "Describe the video in one sentence.",
        "What is in the video?",
        "Is the square moving?",
        "You are a helpful assistant that answers questions about short videos.",
        "Watch the video and answer the question in a few words.",
    ]
    sentences = list(questions)
    for colour in colours:
        sentences += [colour, f"The square is {colour}.", f"It is {colour}.", f"a {colour} square"]
        for direction in DIRECTIONS:
            sentences += [
                f"a {colour} square moving {direction}",
                f"A {colour} square moves from {direction}.",
            ]
    for direction in DIRECTIONS:
        sentences += [direction, f"It moves {direction}.", f"The square moves {direction}.", f"from {direction}"]
    sentences += ["yes", "no", "Yes, it moves.", "No.", "one two three four frame frames video clip"]
    return sentences


def build_tiny_videollm_tokenizer():
    """Build the byte-level BPE tokenizer (a ``PreTrainedTokenizerFast``), offline and deterministically.

    ``tokenizers``' BpeTrainer is deterministic for a fixed corpus, so equal calls give equal
    ``tokenizer.json`` files.  The post-processor prepends ``<s>`` like Mistral's, while the
    chat template writes ``<s>`` itself: render with ``tokenize=False`` and encode with
    ``add_special_tokens=False`` (as :mod:`dit_lora.families.videollm.prompts` does) to get it once.
    ``tokenizer.video_token`` / ``image_token`` are set, as the llava-hf tokenizers have them.
    """
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers
    from transformers import PreTrainedTokenizerFast

    backend = Tokenizer(models.BPE())
    backend.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
    backend.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=640,
        min_frequency=2,
        show_progress=False,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        special_tokens=list(_LEADING_SPECIAL),
    )
    # Each sentence also with a leading space: the template puts answers after " " (and text
    # after special tokens starts a new word), so " The" must merge to "ĠThe" as well as "The".
    # Repeating the corpus makes every demo word frequent enough to be merged whole.
    corpus = [v for s in tokenizer_corpus() for v in (s, " " + s)]
    backend.train_from_iterator(corpus * 4, trainer=trainer)
    backend.add_special_tokens(list(_TRAILING_SPECIAL))
    bos = backend.token_to_id("<s>")
    backend.post_processor = processors.TemplateProcessing(
        single="<s> $A", pair="<s> $A <s> $B:1", special_tokens=[("<s>", bos)]
    )
    return PreTrainedTokenizerFast(
        tokenizer_object=backend,
        bos_token="<s>",
        eos_token="</s>",
        unk_token="<unk>",
        pad_token="<pad>",
        extra_special_tokens={"video_token": "<video>", "image_token": "<image>"},
        chat_template=TINY_VIDEOCHAT_CHAT_TEMPLATE,
        model_max_length=4096,
        padding_side="right",
    )


# --------------------------------------------------------------------------------------
# Model
# --------------------------------------------------------------------------------------
def build_tiny_videollm_model(tokenizer=None, seed: int = 0, dtype: torch.dtype = torch.bfloat16):
    """Build the randomly initialised ``LlavaNextVideoForConditionalGeneration`` in memory (eval mode).

    The text vocabulary is exactly the tokenizer's size and the video/image/pad ids are the
    tokenizer's.  The caller's global torch RNG state is restored afterwards.
    """
    from transformers import (
        CLIPVisionConfig,
        LlavaNextVideoConfig,
        LlavaNextVideoForConditionalGeneration,
        MistralConfig,
    )

    tokenizer = tokenizer if tokenizer is not None else build_tiny_videollm_tokenizer()
    config = get_tiny_videollm_config()
    text = MistralConfig(
        **config["text"],
        vocab_size=len(tokenizer),
        bos_token_id=tokenizer.bos_token_id,
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
    )
    # pad_token_id: a key of the published config that LlavaNextVideoConfig (transformers 5) no longer names but keeps
    multimodal = {**config["multimodal"], "pad_token_id": tokenizer.pad_token_id}
    full = LlavaNextVideoConfig(
        vision_config=CLIPVisionConfig(**config["vision"]),
        text_config=text,
        video_token_index=tokenizer.convert_tokens_to_ids("<video>"),
        image_token_index=tokenizer.convert_tokens_to_ids("<image>"),
        **multimodal,
    )
    model = seeded_model(LlavaNextVideoForConditionalGeneration, full, seed)  # the head scaled (LM_HEAD_SCALE)
    # as a Module: mypy reads the functools.wraps around PreTrainedModel.to as a function taking the model first
    module: torch.nn.Module = model
    return module.to(dtype).eval()


def build_tiny_llava_next_video(path: str | Path, seed: int = 0) -> Path:
    """Write a tiny random LLaVA-NeXT-Video (Mistral LM) folder to ``path`` and return ``path``.

    Contents: ``config.json``, ``model.safetensors`` (bf16), ``generation_config.json``, the
    tokenizer files, ``preprocessor_config.json`` and ``video_preprocessor_config.json``, and
    the ``dit_lora_tiny.json`` marker.  Idempotent (an identical marker means nothing is
    rewritten; another version or seed is rebuilt) and atomic, like the other tiny builders.
    Deterministic: equal seeds give equal weights and files.
    """
    marker = {"kind": "llava_next_video", "seed": seed, "version": TINY_VIDEOCHAT_VERSION}

    def build(tmp: Path) -> None:
        tokenizer = build_tiny_videollm_tokenizer()
        model = build_tiny_videollm_model(tokenizer, seed=seed)
        preprocessor = get_tiny_videollm_config()["preprocessor"]
        processor = {"processor_class": "LlavaNextVideoProcessor"}
        image = dict(preprocessor, image_processor_type="LlavaNextImageProcessor", **processor)
        video = dict(preprocessor, video_processor_type="LlavaNextVideoVideoProcessor", **processor)
        files = {"preprocessor_config.json": image, "video_preprocessor_config.json": video}
        save_tiny_folder(tmp, model, tokenizer, files, sort_keys=True)

    return build_directory_atomically(path, TINY_MARKER, marker, build)
