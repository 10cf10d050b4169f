"""The tiny offline tokenizers the demo models share, built from the words of the demo captions.

The Gemma-style BPE tokenizer (Sana's and SANA-Video's demos, :func:`build_tiny_gemma_tokenizer`) and the
T5-style one (CogVideoX's demo; Wan's reuses it) know the same extra words (:data:`TOKENIZER_CORPUS_EXTRA`) as
whole tokens. Kept here, below the family packages, so one family's demo never imports another's.
"""

from __future__ import annotations

import json
import math
from collections import Counter

from dit_lora.data.synthetic.shapes import COLORS, SHAPES, SHAPES_VALIDATION_PROMPT

# Words the tokenizer should know as whole tokens besides the shapes vocabulary and
# SanaPipeline's default complex_human_instruction; anything else still encodes (characters
# and byte fallback), just in more tokens.
TOKENIZER_CORPUS_EXTRA = (
    "a an the of on in with and or at by for to from is are this that it its background "
    "photo picture image painting drawing illustration render style of sks ohwx dog cat person "
    "man woman small large big tiny bright dark light colorful simple flat centered left right top bottom "
    "shape shapes color colors sky grass tree house car red green blue yellow orange purple pink "
    "white black gray grey brown cyan magenta circle square triangle star rectangle"
)

#: the T5 tokenizer's ``model_max_length``: CogVideoX's real value (its pipelines pad prompts to it)
T5_MAX_LENGTH = 226


def demo_words(*lead: str | list[str], repeated: tuple[str, ...] = ()) -> list[str]:
    """What a tiny demo tokenizer is trained on: the words of ``lead`` (texts, or lists of words) once each, then the
    shapes' colours and names, "background", "on", "a" and ``repeated`` eight times, so BPE merges them into single
    tokens even where they are rare in the rest (Sana's instruction text, a pipeline's prompt template)."""
    words = [word for text in lead for word in (text.split() if isinstance(text, str) else text)]
    return words + (list(COLORS) + list(SHAPES) + ["background", "on", "a", *repeated]) * 8


def _tokenizer_corpus() -> list[str]:
    video = ["video", "clip", "moving", "camera", "slowly", "frame", "motion"]
    return demo_words(TOKENIZER_CORPUS_EXTRA, SHAPES_VALIDATION_PROMPT, video)


def build_tiny_t5_tokenizer(extra_ids: int = 100):
    """Build a T5-style Unigram tokenizer with a small vocabulary, offline and deterministically.

    Pieces: T5's id layout (``<pad>=0 </s>=1 <unk>=2``), then ``"\u2581" + word`` for every
    word of the demo captions (log-frequency scores, so a known word is one token), then
    ``"\u2581"`` and every printable ASCII character (low scores: other text still encodes,
    character by character, never as ``<unk>``), then the ``<extra_id_N>`` sentinels in
    reverse like T5.  The vocabulary is handed to ``transformers.T5Tokenizer(vocab=...)``,
    which builds T5's backend (Unigram, WhitespaceSplit + Metaspace pre-tokenizer, ``</s>``
    appended); the saved ``tokenizer.json`` reloads identically with ``T5Tokenizer`` and
    ``AutoTokenizer``.  (``tokenizers``' UnigramTrainer is not used: its output differs
    from run to run.)  Non-ASCII characters map to ``<unk>``, as in T5's own vocabulary
    for many scripts.
    """
    from transformers import T5Tokenizer  # on use: importing the demo data package stays light

    special = ["<pad>", "</s>", "<unk>"]
    counts = Counter(w for w in _tokenizer_corpus() if w)
    total = sum(counts.values())
    vocab: list[tuple[str, float]] = [(tok, 0.0) for tok in special]
    for word, n in sorted(counts.items(), key=lambda kv: (-kv[1], kv[0])):
        vocab.append(("\u2581" + word, math.log(n / total)))
    for ch in ["\u2581"] + [chr(c) for c in range(33, 127)]:
        vocab.append((ch, -20.0))
    for i in range(extra_ids - 1, -1, -1):
        vocab.append((f"<extra_id_{i}>", 0.0))
    return T5Tokenizer(vocab=vocab, extra_ids=extra_ids, model_max_length=T5_MAX_LENGTH)


__all__ = ["T5_MAX_LENGTH", "TOKENIZER_CORPUS_EXTRA", "build_tiny_t5_tokenizer", "demo_words"]


#: Gemma's special tokens, ids 0..4
_GEMMA_SPECIAL_TOKENS = ("<pad>", "<eos>", "<bos>", "<unk>", "<mask>")


def build_tiny_gemma_tokenizer(words: list[str]):
    """Build a Gemma-style BPE tokenizer with a small vocabulary trained on ``words``, offline.

    The backend has exactly the structure of Gemma's ``tokenizer.json`` (BPE with byte
    fallback, ``" " -> "▁"`` normaliser, ``<bos>`` prepended by the post-processor, ids
    ``<pad>=0 <eos>=1 <bos>=2 <unk>=3 <mask>=4`` then the 256 ``<0xNN>`` byte tokens).  That
    matters with transformers 5: ``GemmaTokenizer.from_pretrained`` does not load
    ``tokenizer.json`` as is but rebuilds that structure from its vocab and merges, so a
    tokenizer of another shape (WordLevel, Whitespace pre-tokenizer ...) would silently
    change on reload.  Merges are trained with ``tokenizers``' BpeTrainer (deterministic) on
    ``words`` (the demo captions and the pipeline's instruction prefix); any other text still
    encodes via characters and byte fallback, never as ``<unk>``.
    """
    import transformers
    from tokenizers import Tokenizer, decoders, models, normalizers, pre_tokenizers, processors, trainers

    # GemmaTokenizerFast: the 4.x name, an alias in 5.x; GemmaTokenizer for a transformers without the alias
    gemma_tokenizer = getattr(transformers, "GemmaTokenizerFast", None) or transformers.GemmaTokenizer

    # Train merges on single words, each with and without the "▁" word-boundary marker
    # (the first word of a text has none), so merges never span two words.
    alphabet = [chr(c) for c in range(32, 127)] + ["\u2581", "\n"]
    trainer_tok = Tokenizer(models.BPE(unk_token="<unk>"))
    trainer = trainers.BpeTrainer(vocab_size=4096, min_frequency=1, show_progress=False, initial_alphabet=alphabet)
    trainer_tok.train_from_iterator((v for w in words for v in (w, "\u2581" + w)), trainer=trainer)
    trained = json.loads(trainer_tok.to_str())["model"]

    vocab: dict[str, int] = {}
    for token in (*_GEMMA_SPECIAL_TOKENS, *(f"<0x{b:02X}>" for b in range(256))):
        vocab[token] = len(vocab)
    for token, _ in sorted(trained["vocab"].items(), key=lambda kv: kv[1]):
        vocab.setdefault(token, len(vocab))
    merges = [tuple(m) if isinstance(m, list) else tuple(m.split(" ")) for m in trained["merges"]]

    backend = Tokenizer(
        models.BPE(vocab=vocab, merges=merges, unk_token="<unk>", fuse_unk=True, byte_fallback=True, dropout=None)
    )
    backend.normalizer = normalizers.Replace(" ", "\u2581")
    backend.pre_tokenizer = pre_tokenizers.Split(pattern=" ", behavior="merged_with_previous", invert=False)
    backend.decoder = decoders.Sequence([decoders.Replace("\u2581", " "), decoders.ByteFallback(), decoders.Fuse()])
    backend.post_processor = processors.TemplateProcessing(
        single="<bos> $A", pair="<bos> $A <bos> $B:1", special_tokens=[("<bos>", vocab["<bos>"])]
    )
    backend.add_special_tokens(list(_GEMMA_SPECIAL_TOKENS))

    return gemma_tokenizer(
        tokenizer_object=backend,
        bos_token="<bos>",
        eos_token="<eos>",
        pad_token="<pad>",
        unk_token="<unk>",
        mask_token="<mask>",
        add_bos_token=True,
        add_eos_token=False,
        # SanaPipeline sets padding_side="right" itself; storing it makes direct users of
        # the tokenizer (trainers caching embeddings) pad the same way.
        padding_side="right",
    )
