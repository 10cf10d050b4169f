"""Validation samples on disk: each prompt's samples under their own names and, for images of several prompts, one
grid with each prompt written under its images (what ai-toolkit and SimpleTuner users look at after a validation).

One prompt keeps the names a run has always written (``<tag>_<i>``: the cards and guides name
``samples/final_0.png``); several prompts name each sample after its prompt's position (``<tag>_p<k>_<i>``).
"""

from __future__ import annotations

import textwrap
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from dit_lora.core.fileio import atomic_write

#: the grid's look: a white band under each row of images holding the prompt, in PIL's built-in font
_MARGIN = 4
_FONT_SIZE = 12
_LINE_HEIGHT = 15
_MAX_LINES = 4


def sample_stem(folder: Path, tag: str, prompt_index: int, sample_index: int, several: bool) -> Path:
    """Where sample ``sample_index`` of prompt ``prompt_index`` goes (without the family's extension)."""
    if not several:
        return folder / f"{tag}_{sample_index}"
    return folder / f"{tag}_p{prompt_index}_{sample_index}"


def save_prompt_samples(
    save: Callable[[Any, Path], Path],
    folder: Path,
    tag: str,
    prompts: Sequence[str],
    made: Sequence[Sequence[Any]],
) -> list[Path]:
    """Write ``made[k]`` (the samples of ``prompts[k]``) with ``save`` (the family's writer: sample, stem -> path)
    and, for image samples of several prompts, ``<tag>_grid.png``; returns the files, the grid first."""
    several = len(prompts) > 1
    files = [
        save(item, sample_stem(folder, tag, k, i, several))
        for k, items in enumerate(made)
        for i, item in enumerate(items)
    ]
    grid = prompt_grid(prompts, made) if several else None
    if grid is None:
        return files
    path = folder / f"{tag}_grid.png"
    atomic_write(path, lambda tmp: grid.save(tmp, format="PNG"))  # a stop mid-write never leaves half a PNG
    return [path, *files]


def prompt_grid(prompts: Sequence[str], made: Sequence[Sequence[Any]]):
    """One image: a row per prompt (its samples side by side, the prompt wrapped under them), or None when the
    samples are not images (clips, a video LLM's answers)."""
    from PIL import Image, ImageDraw, ImageFont

    if not made or not all(items and all(isinstance(i, Image.Image) for i in items) for items in made):
        return None
    cell_w = max(i.width for items in made for i in items)
    cell_h = max(i.height for items in made for i in items)
    columns = max(len(items) for items in made)
    width = columns * cell_w + (columns + 1) * _MARGIN
    font = ImageFont.load_default(size=_FONT_SIZE)
    chars = max(8, (width - 2 * _MARGIN) // (_FONT_SIZE * 6 // 10))  # about 0.6 em a character
    texts = [_wrapped(prompt, chars) for prompt in prompts]
    bands = [len(lines) * _LINE_HEIGHT + 2 * _MARGIN for lines in texts]
    height = sum(cell_h + _MARGIN + band for band in bands) + _MARGIN
    grid = Image.new("RGB", (width, height), "white")
    draw = ImageDraw.Draw(grid)
    top = _MARGIN
    for items, lines, band in zip(made, texts, bands, strict=True):
        for column, image in enumerate(items):
            grid.paste(image.convert("RGB"), (_MARGIN + column * (cell_w + _MARGIN), top))
        top += cell_h + _MARGIN
        for n, line in enumerate(lines):
            draw.text((_MARGIN, top + _MARGIN + n * _LINE_HEIGHT), line, fill="black", font=font)
        top += band
    return grid


def _wrapped(prompt: str, chars: int) -> list[str]:
    """``prompt`` in lines of at most ``chars`` characters, at most _MAX_LINES (the last one cut with an ellipsis)."""
    lines = textwrap.wrap(prompt, chars) or [""]
    if len(lines) > _MAX_LINES:
        lines = [
            *lines[: _MAX_LINES - 1],
            textwrap.shorten(" ".join(lines[_MAX_LINES - 1 :]), chars, placeholder="..."),
        ]
    return lines
