"""The look over a run's captions printed at its end, as ``check-data`` looks over training captions: empty
captions, captions cleaned of control characters, captions cut at ``--max_new_tokens``, a phrase the model got stuck
repeating, and one caption given to several files (a captioner that says the same of everything is usually a prompt
or model problem).
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass

__all__ = ["CaptionFacts", "caption_report", "repeated_phrase"]

#: how many file names a line shows
NAMED = 3
#: a phrase of this many words (to LOOP_LONGEST), said this many times in a row or more, is a loop
LOOP_WORDS, LOOP_LONGEST, LOOP_TIMES = 2, 12, 3


@dataclass(frozen=True)
class CaptionFacts:
    """One written caption: the file, the text as written (prefix and suffix included), whether the model stopped
    by itself, and how many control or replacement characters were removed from the model's text before writing."""

    key: str
    text: str
    finished: bool = True
    removed: int = 0


def repeated_phrase(text: str) -> str | None:
    """A phrase of two to twelve words said three times or more in a row (``a cat a cat a cat``), or None."""
    words = re.findall(r"\w+", text.lower())
    for size in range(LOOP_WORDS, min(LOOP_LONGEST, len(words) // LOOP_TIMES) + 1):
        for start in range(len(words) - size * LOOP_TIMES + 1):
            phrase = words[start : start + size]
            if all(words[start + k * size : start + (k + 1) * size] == phrase for k in range(1, LOOP_TIMES)):
                return " ".join(phrase)
    return None


def _names(keys: Sequence[str]) -> str:
    return ", ".join(keys[:NAMED]) + (f" and {len(keys) - NAMED} more" if len(keys) > NAMED else "")


def caption_report(captions: Sequence[CaptionFacts], *, max_new_tokens: int, word_counts: bool = True) -> list[str]:
    """The lines the run ends with: the captions' lengths in words, then one line per kind of problem found."""
    if not captions:
        return []
    lines = []
    if word_counts:
        counts = sorted(len(c.text.split()) for c in captions)
        lines.append(
            f"captions: {len(captions)}, {counts[0]} to {counts[-1]} words (median {counts[len(counts) // 2]})"
        )
    empty = [c.key for c in captions if not c.text.strip()]
    if empty:
        lines.append(
            f"empty: {len(empty)} caption(s) are empty ({_names(empty)}); training leaves those files out. Caption "
            "them again with another --prompt, or write them by hand."
        )
    cleaned = [c.key for c in captions if c.removed]
    if cleaned:
        lines.append(
            f"cleaned: {len(cleaned)} caption(s) held control characters (NUL, ESC, ...) or U+FFFD (bytes the model "
            f"produced that are no text), {sum(c.removed for c in captions)} in all, removed before writing "
            f"({_names(cleaned)}): training refuses control characters, and U+FFFD stands for no text. A captioner "
            "that writes them is often too small or broken: read its captions."
        )
    cut = [c.key for c in captions if not c.finished]
    if cut:
        lines.append(
            f"cut: {len(cut)} caption(s) reached --max_new_tokens {max_new_tokens} before the model ended them "
            f"({_names(cut)}). Raise --max_new_tokens, or ask for shorter captions in --prompt."
        )
    loops = [(c.key, phrase) for c in captions if (phrase := repeated_phrase(c.text))]
    if loops:
        lines.append(
            f"repeats: {len(loops)} caption(s) say a phrase over and over (e.g. {loops[0][0]}: {loops[0][1]!r} x3 or "
            f"more; {_names([k for k, _ in loops])}). Read them: a model stuck in a loop describes nothing."
        )
    same = [(text, n) for text, n in Counter(c.text for c in captions if c.text.strip()).items() if n > 1]
    if same:
        text, n = max(same, key=lambda pair: pair[1])
        files = [c.key for c in captions if c.text == text]
        lines.append(
            f"same: {sum(n for _, n in same)} files share {len(same)} caption(s) word for word (e.g. {n} files: "
            f"{_names(files)}: {text[:80]!r}). A caption that fits every file teaches nothing: check the prompt."
        )
    return lines
