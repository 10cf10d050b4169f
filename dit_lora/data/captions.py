"""Say what training silently changes about the data: captions cut to the text length, files listed twice.

Both are reported once, at the start of a run (:func:`~dit_lora.data.prepare.prepare_data`) and in
``dit-lora check-data``, with a count and the first few names, never once per sample:

* a caption longer than the text encoder's ``max_sequence_length`` is cut by the family's encode (Sana keeps 300
  tokens, CogVideoX 226): judged in tokens by the model's own tokenizer, one batched pass over the captions. Without
  a tokenizer (``check-data`` without ``--pretrained_model_name_or_path``) it is estimated from the characters, and
  the line says so;
* a file named by several metadata rows is trained on once per row each epoch (several captions for one image are
  a legitimate use, an accidental duplicate is not, so it is reported rather than dropped).
"""

from __future__ import annotations

import json
import os
from collections import Counter
from collections.abc import Callable, Sequence
from typing import Any

from dit_lora.catalogue import entries
from dit_lora.contract.capabilities import HasTextSettings, PromptText, TextSettings
from dit_lora.contract.spec import FamilySpec, caption_source
from dit_lora.data.sources import MAX_NAMED

__all__ = [
    "CHARS_PER_TOKEN",
    "TokenCounter",
    "caption_lines",
    "duplicate_line",
    "token_counter_for_model",
    "token_counter_from_components",
    "truncation_line",
]

#: a rough English average for subword tokenizers (T5, Gemma): what check-data assumes without a tokenizer
CHARS_PER_TOKEN = 4


class TokenCounter:
    """Counts a caption's tokens as the family's encode will and knows the most it keeps.

    ``limit`` is compared with ``count(captions)`` (special tokens included, and a ``prefix`` the pipeline puts
    before every caption inside the same length); ``length`` is the ``--max_sequence_length`` it derives from (what
    the line names). ``exact`` is False for the character estimate; ``what`` words the line ("the model's
    tokenizer", "estimated at 4 characters a token").
    """

    def __init__(
        self,
        count: Callable[[list[str]], list[int]],
        length: int,
        *,
        instruction: bool = False,
        prefix: str | None = None,
        refused: bool = False,
        exact: bool,
        what: str,
    ) -> None:
        self.length, self.exact, self.what, self.prefix = int(length), exact, what, prefix or ""
        self.refused = refused  # the pipeline refuses a longer caption (TextSettings.refused), it does not cut it
        self.count = count if not self.prefix else lambda captions: count([self.prefix + c for c in captions])
        # SanaPipeline._get_gemma_prompt_embeds: with the complex human instruction prefixed, the tokenizer keeps
        # len(instruction) + max_sequence_length - 2 tokens, one fewer for the caption than without it.
        self.limit = self.length - 1 if instruction else self.length


def _tokenizer_counts(tokenizer: Any) -> Callable[[list[str]], list[int]]:
    def count(captions: list[str]) -> list[int]:
        # One batched pass, no truncation and no padding: every caption's full length with the special tokens the
        # pipelines add (Gemma's <bos>, T5's </s>).
        ids = tokenizer(list(captions), add_special_tokens=True, truncation=False, padding=False)["input_ids"]
        return [len(i) for i in ids]

    return count


def _shape(text: TextSettings | None) -> dict[str, Any]:
    """What a :class:`TokenCounter` takes of the run's text settings besides the length: whether an instruction is
    prefixed, and the prefix counted with each caption."""
    return {
        "instruction": bool(text and text.instruction),
        "prefix": text.prefix if text else None,
        "refused": bool(text and text.refused),
    }


def _loaded_settings(comps: Any) -> tuple[int | None, dict[str, Any]]:
    """``(max_sequence_length, the counter's shape)`` of a loaded run: its typed state's :class:`TextSettings` (a
    state implementing :class:`HasTextSettings`); ``(None, no shape)`` for a state without text settings."""
    state = getattr(comps, "state", None)
    text = state.text if isinstance(state, HasTextSettings) else None
    return (text.max_sequence_length if text is not None else None), _shape(text)


def token_counter_from_components(comps: Any) -> TokenCounter | None:
    """The counter of a loaded run: ``comps.encoders["tokenizer"]`` at the run's text length (what Sana and CogVideoX
    encode with), or None for a family without caption tokens (DiT's class labels)."""
    tokenizer = getattr(comps, "encoders", {}).get("tokenizer")
    max_length, shape = _loaded_settings(comps)
    if tokenizer is None or not max_length:
        return None
    return TokenCounter(_tokenizer_counts(tokenizer), max_length, **shape, exact=True, what="the model's tokenizer")


def _declared_settings(cfg: Any, spec: FamilySpec) -> tuple[int | None, dict[str, Any]]:
    """The family's own word on how a run of ``cfg`` encodes captions: its encoders' :class:`PromptText`, else
    ``(None, no shape)`` (the other sources apply)."""
    if isinstance(spec.encoders, PromptText):
        text = spec.encoders.text_settings(cfg)
        return text.max_sequence_length, _shape(text)
    return None, _shape(None)


def _run_settings(cfg: Any, spec: FamilySpec) -> tuple[int | None, dict[str, Any]]:
    """The ``max_sequence_length`` a run of ``cfg`` encodes captions at, and the counter's shape (an instruction or
    prefix), without loading a weight: with a model, the family's own word (:func:`_declared_settings`); then the
    model's transformer config (CogVideoX's fixed length), then the catalogue's text length for the family."""
    declared, shape = None, _shape(None)
    model = cfg.model.pretrained_model_name_or_path
    if model:  # exact counts only with the model's tokenizer; without it the estimate needs no pipeline import
        declared, shape = _declared_settings(cfg, spec)
    length = cfg.data.max_sequence_length or declared
    config = os.path.join(model, "transformer", "config.json") if model else ""
    if not length and config and os.path.isfile(config):
        with open(config, encoding="utf-8") as handle:
            length = json.load(handle).get("max_text_seq_length")
    if not length:
        lengths = {e.text_length for e in entries(spec.name)}
        length = lengths.pop() if len(lengths) == 1 else None
    return (int(length) if length and int(length) > 1 else None), shape


def token_counter_for_model(cfg: Any, spec: FamilySpec) -> tuple[TokenCounter | None, str | None]:
    """check-data's counter: the tokenizer of ``--pretrained_model_name_or_path`` (only the tokenizer is read) at the
    length the run would use; else a character estimate. Returns (counter or None, a note on how it counts)."""
    if caption_source(spec) != "captions":
        return None, None  # class labels (DiT), not encoded text
    max_length, shape = _run_settings(cfg, spec)
    if not max_length:
        return None, None
    model = cfg.model.pretrained_model_name_or_path
    if model:
        try:
            from transformers import AutoTokenizer

            tokenizer = AutoTokenizer.from_pretrained(model, subfolder="tokenizer", revision=cfg.model.revision)
        except Exception as err:
            note = f"caption length: estimated (the tokenizer of {model} did not load: {type(err).__name__})"
        else:
            return TokenCounter(
                _tokenizer_counts(tokenizer),
                max_length,
                **shape,
                exact=True,
                what="the model's tokenizer",
            ), None
    else:
        note = (
            "caption length: estimated at 4 characters a token (pass --pretrained_model_name_or_path to count "
            "with the model's tokenizer)"
        )
    estimate = TokenCounter(
        lambda captions: [-(-len(c) // CHARS_PER_TOKEN) for c in captions],
        max_length,
        **shape,
        exact=False,
        what=f"estimated at {CHARS_PER_TOKEN} characters a token",
    )
    return estimate, note


def _over(samples: Sequence[Any], counter: TokenCounter) -> tuple[list[tuple[Any, int]], str]:
    """The samples whose captions exceed the counter's limit with their token counts, and the first few named."""
    counts = counter.count([s.caption for s in samples])
    over = [(s, n) for s, n in zip(samples, counts) if n > counter.limit]
    named = ", ".join(f"{s.key} ({len(s.caption):,} characters, {n:,} tokens)" for s, n in over[:MAX_NAMED])
    return over, named + (f" and {len(over) - MAX_NAMED} more" if len(over) > MAX_NAMED else "")


def truncation_line(samples: Sequence[Any], counter: TokenCounter | None) -> str | None:
    """One line naming the captions the text length cuts (count, the first few with their lengths), or None; for a
    pipeline that refuses them instead (:attr:`TokenCounter.refused`), the line says a run stops on them."""
    if counter is None or not samples:
        return None
    over, named = _over(samples, counter)
    if not over:
        return None
    prefixed = ", with the text the pipeline encodes with every caption in the same length" if counter.prefix else ""
    head = f"long captions: {len(over)} of {len(samples)} caption(s) exceed the {counter.length}-token text length "
    if counter.refused:
        return (
            f"{head}({counter.what}{prefixed}), which the pipeline refuses rather than cut, so a run leaves them out "
            f"as bad samples: {named}. Shorten them, or raise --max_sequence_length."
        )
    verb = "are cut" if counter.exact else "would likely be cut"
    return (
        f"{head}({counter.what}{prefixed}) and {verb} to it; the model never sees the rest: {named}. Shorten them, or "
        f"raise --max_sequence_length where the model allows it."
    )


def refused_captions(samples: Sequence[Any], counter: TokenCounter | None) -> dict[str, int]:
    """``{sample key: tokens}`` of the captions a run leaves out (a pipeline that refuses them,
    :attr:`TokenCounter.refused`, counted exactly): check-data blocks their rows as the run quarantines them."""
    if counter is None or not counter.refused or not counter.exact or not samples:
        return {}
    return {s.key: n for s, n in _over(samples, counter)[0]}


def duplicate_line(samples: Sequence[Any]) -> str | None:
    """One line naming the files listed by more than one metadata row (each is trained on once per row), or None."""
    # A kohya folder's repeats (``repeat`` > 0) are asked for by its name, not extra rows: said by sources.py instead.
    counts = Counter(
        s.key
        for s in samples
        if (getattr(s, "path", None) or getattr(s, "refused", None)) and not getattr(s, "repeat", 0)
    )
    repeated = [(key, n) for key, n in counts.items() if n > 1]
    if not repeated:
        return None
    named = ", ".join(f"{key} (x{n})" for key, n in repeated[:MAX_NAMED])
    more = f" and {len(repeated) - MAX_NAMED} more" if len(repeated) > MAX_NAMED else ""
    extra = sum(n - 1 for _, n in repeated)
    return (
        f"duplicates: {len(repeated)} file(s) are listed by more than one metadata row ({extra} extra row(s)), "
        f"so each is trained on once per row every epoch: {named}{more}. Delete the extra rows unless they are "
        f"meant (several captions for one file)."
    )


def caption_lines(samples: Sequence[Any], counter: TokenCounter | None) -> list[str]:
    """The duplicate and long-caption lines for ``samples`` (empty when there is nothing to say)."""
    return [line for line in (duplicate_line(samples), truncation_line(samples, counter)) if line]
