"""A tiny, randomly initialised Qwen2.5-VL checkpoint built locally (no Hub access needed).

:func:`build_tiny_qwen2_5_vl` writes what ``Qwen/Qwen2.5-VL-*-Instruct`` ships, shrunk:

* ``config.json`` + ``model.safetensors`` (bf16, like the published checkpoints) and
  ``generation_config.json`` from ``Qwen2_5_VLForConditionalGeneration.save_pretrained``;
* ``tokenizer.json`` / ``tokenizer_config.json`` (a ``PreTrainedTokenizerFast``): Qwen2's byte-level
  BPE layout (Qwen's pre-tokenizer regex, NFC, byte-level decoder), every byte as a base token so
  any text encodes, whole-word merges for the demo questions and answers (colours, "left to right",
  ...), and Qwen's special tokens after the regular vocabulary in Qwen's order (``<|endoftext|>``,
  ``<|im_start|>``, ``<|im_end|>``, ... ``<|vision_start|>``, ``<|vision_end|>``,
  ``<|vision_pad|>``, ``<|image_pad|>``, ``<|video_pad|>``).  ``eos_token`` is ``<|im_end|>``,
  ``pad_token`` ``<|endoftext|>``, no BOS, as in the Instruct tokenizers;
* the Instruct models' ChatML chat template (:data:`QWEN2_5_VL_CHAT_TEMPLATE`): a default system
  message when the conversation has none, each message as ``<|im_start|>{role}\\n{content}<|im_end|>\\n``,
  list content with ``{"type": "video"}`` rendered as ``<|vision_start|><|video_pad|><|vision_end|>``
  (``{"type": "image"}`` as ``<|vision_start|><|image_pad|><|vision_end|>``), and
  ``<|im_start|>assistant\\n`` for ``add_generation_prompt``;
* ``preprocessor_config.json`` with the keys the real one has (``min_pixels``, ``max_pixels``,
  ``patch_size``, ``temporal_patch_size``, ``merge_size``, ``image_mean``, ``image_std``); read by
  :meth:`dit_lora.families.videollm.qwen2_5_vl.Qwen25VLSpec.load_preprocessing`;
* a ``dit_lora_tiny.json`` marker (:data:`TINY_QWEN2_5_VL_VERSION`).

Only widths and depths shrink; the structure (module names, window attention with a
full-attention block, 2x2 PatchMerger, M-RoPE) is the real one.  Geometry: ``patch_size`` 14,
``spatial_merge_size`` 2, ``temporal_patch_size`` 2 as in the real models, so a 64 x 64 demo frame
resizes to 56 x 56 (4 x 4 patches, 2 x 2 = 4 LLM tokens per pair of frames).  ``window_size`` is
56 px instead of 112 (windows of 2 x 2 merged tokens) so that frames of 112 px or more already use
several attention windows.  ``max_pixels`` is 112 * 112 (the real checkpoints allow 12845056) to
keep CPU runs small.  The text model's ``mrope_section`` [2, 3, 3] keeps the real 2:3:3 split
([16, 24, 24] of head_dim 128) for head_dim 16.
"""

from __future__ import annotations

from collections import Counter
from pathlib import Path
from typing import TYPE_CHECKING, Any

from dit_lora.data.synthetic import build_directory_atomically
from dit_lora.data.synthetic.clips import CLIP_COLORS, DIRECTIONS
from dit_lora.families.videollm.demo_common import TINY_MARKER, save_tiny_folder, seeded_model
from dit_lora.kit.demo_file import DemoFile

if TYPE_CHECKING:
    from transformers import PreTrainedTokenizerFast

__all__ = [
    "QWEN2_5_VL_CHAT_TEMPLATE",
    "QWEN2_5_VL_DEFAULT_SYSTEM",
    "QWEN_SPECIAL_TOKENS",
    "TINY_QWEN2_5_VL_VERSION",
    "build_tiny_qwen2_5_vl",
    "build_tiny_qwen_tokenizer",
    "get_tiny_qwen2_5_vl_config",
]

#: the language model's, the vision tower's and the preprocessor's configs, and their reasons: ``demo_qwen.json``
DEMO = DemoFile(__name__, keys=("text", "vision", "preprocessor"), filename="demo_qwen.json")
TINY_QWEN2_5_VL_VERSION = DEMO.read().version  # bump the file's when the config, init, tokenizer or template change

# Qwen2/2.5's special tokens, in the order of their ids (151643 ...) in the real vocabulary.
QWEN_SPECIAL_TOKENS = (
    "<|endoftext|>",
    "<|im_start|>",
    "<|im_end|>",
    "<|object_ref_start|>",
    "<|object_ref_end|>",
    "<|box_start|>",
    "<|box_end|>",
    "<|quad_start|>",
    "<|quad_end|>",
    "<|vision_start|>",
    "<|vision_end|>",
    "<|vision_pad|>",
    "<|image_pad|>",
    "<|video_pad|>",
)

# Qwen2's pre-tokenizer split (tokenizer.json of Qwen2 / Qwen2.5 / Qwen2.5-VL).
_QWEN_SPLIT_REGEX = (
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*"
    r"|\s*[\r\n]+|\s+(?!\S)|\s+"
)

#: the Qwen2.5-VL template's default system message, written when a conversation starts without one (Qwen3-VL's
#: template is this one without it)
QWEN2_5_VL_DEFAULT_SYSTEM = (
    "{%- if loop.first and message['role'] != 'system' -%}"
    "{{- '<|im_start|>system\\nYou are a helpful assistant.<|im_end|>\\n' -}}"
    "{%- endif -%}"
)

# The Instruct models' template (same rendering as the chat_template.json of
# Qwen/Qwen2.5-VL-7B-Instruct, including ``add_vision_id``).
QWEN2_5_VL_CHAT_TEMPLATE = (
    "{%- set image_count = namespace(value=0) -%}"
    "{%- set video_count = namespace(value=0) -%}"
    "{%- for message in messages -%}" + QWEN2_5_VL_DEFAULT_SYSTEM + "{{- '<|im_start|>' + message['role'] + '\\n' -}}"
    "{%- if message['content'] is string -%}"
    "{{- message['content'] -}}"
    "{%- else -%}"
    "{%- for content in message['content'] -%}"
    "{%- if content['type'] == 'image' or 'image' in content or 'image_url' in content -%}"
    "{%- set image_count.value = image_count.value + 1 -%}"
    "{%- if add_vision_id -%}{{- 'Picture ' + image_count.value|string + ': ' -}}{%- endif -%}"
    "{{- '<|vision_start|><|image_pad|><|vision_end|>' -}}"
    "{%- elif content['type'] == 'video' or 'video' in content -%}"
    "{%- set video_count.value = video_count.value + 1 -%}"
    "{%- if add_vision_id -%}{{- 'Video ' + video_count.value|string + ': ' -}}{%- endif -%}"
    "{{- '<|vision_start|><|video_pad|><|vision_end|>' -}}"
    "{%- elif 'text' in content -%}"
    "{{- content['text'] -}}"
    "{%- endif -%}"
    "{%- endfor -%}"
    "{%- endif -%}"
    "{{- '<|im_end|>\\n' -}}"
    "{%- endfor -%}"
    "{%- if add_generation_prompt -%}"
    "{{- '<|im_start|>assistant\\n' -}}"
    "{%- endif -%}"
)

_TEXT_CONFIG: dict[str, Any] = DEMO.read().variant("tiny")["text"]
_MODEL_MAX_LENGTH = _TEXT_CONFIG["max_position_embeddings"]


# --------------------------------------------------------------------------------------
# Tokenizer
# --------------------------------------------------------------------------------------
def _corpus_words() -> list[str]:
    """Words of the demo conversations (questions about the moving-square clips and their answers)."""

    text = [
        "You are a helpful assistant.",
        "What colour is the square? What color is the square in the video?",
        "Which direction does the square move? In which direction is it moving?",
        "Describe the video. Describe this clip. What happens in the video?",
        "The square is red. It moves from left to right. It is moving right to left.",
        "A square moving top to bottom on a dark background. bottom to top",
        "Yes No The a an it this that of on in and from to",
        "circle triangle shape frame frames camera slowly fast",
    ]
    text += [f"a {c} square moving {d}" for c in CLIP_COLORS for d in DIRECTIONS]
    text += list(CLIP_COLORS) + ["white", "black", "orange", "purple"]
    words: list[str] = []
    for line in text:
        for word in line.replace("?", " ?").replace(".", " .").split():
            words.append(word)
    return words


def _bytes_to_unicode() -> dict[int, str]:
    """GPT-2 / Qwen2 byte-level alphabet: printable bytes map to themselves, the rest to U+0100 + n."""
    printable = list(range(ord("!"), ord("~") + 1)) + list(range(ord("\u00a1"), ord("\u00ac") + 1))
    printable += list(range(ord("\u00ae"), ord("\u00ff") + 1))
    mapping = {b: chr(b) for b in printable}
    extra = 0
    for b in range(256):
        if b not in mapping:
            mapping[b] = chr(256 + extra)
            extra += 1
    return mapping


def _learn_merges(words: list[str], alphabet: dict[int, str]) -> list[tuple[str, str]]:
    """Byte-pair merges learned to completion on ``words`` (each word then encodes as one token).

    Plain BPE (most frequent adjacent pair first), with ties broken by the pair's text so the result
    never depends on hashing or thread order.  ``tokenizers``' BpeTrainer is not used for that reason.
    """
    # Every word both at the start of a text and after a space ("Ġword"), as GPT-2 style BPE sees it.
    counts: Counter[tuple[str, ...]] = Counter()
    for word in words:
        encoded = "".join(alphabet[b] for b in word.encode("utf-8"))
        counts[tuple(encoded)] += 1
        counts[tuple(alphabet[ord(" ")] + encoded)] += 1
    merges: list[tuple[str, str]] = []
    while True:
        pairs: Counter[tuple[str, str]] = Counter()
        for pieces, n in counts.items():
            for a, b in zip(pieces, pieces[1:]):
                pairs[(a, b)] += n
        if not pairs:
            return merges
        best = min(pairs, key=lambda p: (-pairs[p], p))
        merges.append(best)
        merged: Counter[tuple[str, ...]] = Counter()
        for pieces, n in counts.items():
            out: list[str] = []
            i = 0
            while i < len(pieces):
                if i + 1 < len(pieces) and (pieces[i], pieces[i + 1]) == best:
                    out.append(pieces[i] + pieces[i + 1])
                    i += 2
                else:
                    out.append(pieces[i])
                    i += 1
            merged[tuple(out)] += n
        counts = merged


def build_tiny_qwen_tokenizer() -> PreTrainedTokenizerFast:
    """A Qwen2-style byte-level BPE ``PreTrainedTokenizerFast`` with a small vocabulary, offline.

    Ids: the 256 byte symbols (0-255, in byte order), then one token per learned merge, then
    :data:`QWEN_SPECIAL_TOKENS` (all ``special``, so they are never split and are skipped by
    ``decode(skip_special_tokens=True)``).  Deterministic: the same vocabulary and merges every run.
    """
    from tokenizers import AddedToken, Regex, Tokenizer, decoders, models, normalizers, pre_tokenizers, processors
    from transformers import PreTrainedTokenizerFast

    alphabet = _bytes_to_unicode()
    merges = _learn_merges(_corpus_words(), alphabet)
    vocab: dict[str, int] = {alphabet[b]: b for b in range(256)}
    for a, b in merges:
        vocab.setdefault(a + b, len(vocab))

    backend = Tokenizer(models.BPE(vocab=vocab, merges=merges, unk_token=None, fuse_unk=False, byte_fallback=False))
    backend.normalizer = normalizers.NFC()
    backend.pre_tokenizer = pre_tokenizers.Sequence(
        [
            pre_tokenizers.Split(Regex(_QWEN_SPLIT_REGEX), behavior="isolated", invert=False),
            pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
        ]
    )
    backend.decoder = decoders.ByteLevel()  # no options: it ignored the add_prefix_space/use_regex it was given
    backend.post_processor = processors.ByteLevel(add_prefix_space=False, trim_offsets=False, use_regex=False)
    backend.add_special_tokens(
        [AddedToken(t, special=True, normalized=False, lstrip=False, rstrip=False) for t in QWEN_SPECIAL_TOKENS]
    )
    return PreTrainedTokenizerFast(
        tokenizer_object=backend,
        eos_token="<|im_end|>",
        pad_token="<|endoftext|>",
        bos_token=None,
        unk_token=None,
        chat_template=QWEN2_5_VL_CHAT_TEMPLATE,
        model_max_length=_MODEL_MAX_LENGTH,
        padding_side="right",
        clean_up_tokenization_spaces=False,
    )


# --------------------------------------------------------------------------------------
# Model
# --------------------------------------------------------------------------------------
def get_tiny_qwen2_5_vl_config(tokenizer=None):
    """The tiny ``Qwen2_5_VLConfig``; token ids come from ``tokenizer`` (default: the tiny one)."""
    from transformers import Qwen2_5_VLConfig

    tok = tokenizer if tokenizer is not None else build_tiny_qwen_tokenizer()
    ids = {t: tok.convert_tokens_to_ids(t) for t in QWEN_SPECIAL_TOKENS}
    vocab_size = -(-len(tok) // 64) * 64  # padded like the real vocabularies (151936 / 152064)
    text = dict(
        _TEXT_CONFIG,
        vocab_size=vocab_size,
        bos_token_id=ids["<|endoftext|>"],
        eos_token_id=ids["<|im_end|>"],
        pad_token_id=None,
    )
    vision = dict(DEMO.read().variant("tiny")["vision"], out_hidden_size=_TEXT_CONFIG["hidden_size"])
    return Qwen2_5_VLConfig(
        text_config=text,
        vision_config=vision,
        image_token_id=ids["<|image_pad|>"],
        video_token_id=ids["<|video_pad|>"],
        vision_start_token_id=ids["<|vision_start|>"],
        vision_end_token_id=ids["<|vision_end|>"],
        tie_word_embeddings=False,
    )


def build_tiny_qwen2_5_vl(path: str | Path, seed: int = 0) -> Path:
    """Write the tiny Qwen2.5-VL checkpoint (see the module docstring) to ``path`` and return it.

    Deterministic for a given ``seed``; idempotent (an identical marker means nothing is rewritten)
    and atomic (built in a sibling temporary directory and renamed), like the other tiny builders.
    Loads offline with ``Qwen2_5_VLForConditionalGeneration.from_pretrained(path)`` and
    ``AutoTokenizer.from_pretrained(path)``.
    """
    marker = {"kind": "qwen2_5_vl", "seed": seed, "dtype": "bfloat16", "version": TINY_QWEN2_5_VL_VERSION}

    def build(tmp: Path) -> None:
        from transformers import GenerationConfig, Qwen2_5_VLForConditionalGeneration

        tok = build_tiny_qwen_tokenizer()
        model = seeded_model(Qwen2_5_VLForConditionalGeneration, get_tiny_qwen2_5_vl_config(tok), seed, None)
        model.generation_config = GenerationConfig(
            bos_token_id=tok.convert_tokens_to_ids("<|endoftext|>"),
            eos_token_id=[tok.convert_tokens_to_ids("<|im_end|>"), tok.convert_tokens_to_ids("<|endoftext|>")],
            pad_token_id=tok.convert_tokens_to_ids("<|endoftext|>"),
        )
        save_tiny_folder(tmp, model, tok, {"preprocessor_config.json": DEMO.read().variant("tiny")["preprocessor"]})

    return build_directory_atomically(path, TINY_MARKER, marker, build)
