"""A tiny captioned image data set of coloured shapes, drawn with PIL (no downloads).

``make_shapes_dataset(dir)`` writes ``dir/00000.png ...`` plus ``dir/metadata.jsonl`` with one
``{"file_name": ..., "text": ...}`` line per image, i.e. the layout that
``datasets.load_dataset("imagefolder", data_dir=dir)`` and most LoRA trainers read.  Captions
name the shape, its colour and the background colour ("a red circle on a blue background"),
so a LoRA trained on it has something prompt-dependent to learn.
"""

from __future__ import annotations

import json
import random
from pathlib import Path

from PIL import Image, ImageDraw

from dit_lora.core.errors import UserError
from dit_lora.data.synthetic import build_directory_atomically

__all__ = [
    "COLORS",
    "SHAPES",
    "SHAPES_VALIDATION_PROMPT",
    "SHAPES_DATASET_VERSION",
    "MAX_DEMO_RESOLUTION",
    "check_demo_resolution",
    "make_shapes_class_dataset",
    "make_shapes_dataset",
    "render_shape_example",
]

# Bump when the drawing or the caption format changes, so cached data sets are rebuilt.
SHAPES_DATASET_VERSION = 1
SHAPES_MARKER = "dit_lora_shapes.json"  # in a folder make_shapes_dataset built

# Saturated, well separated colours: after a 8x VAE compression at 64 px the colour is the
# main signal that survives, so they must differ clearly in RGB.
COLORS: dict[str, tuple[int, int, int]] = {
    "red": (220, 30, 30),
    "green": (30, 170, 60),
    "blue": (30, 60, 220),
    "yellow": (240, 220, 30),
    "orange": (245, 140, 20),
    "purple": (140, 50, 190),
    "white": (245, 245, 245),
    "black": (15, 15, 15),
}
SHAPES: tuple[str, ...] = ("circle", "square", "triangle")

# A combination that make_shapes_dataset can produce, used to render validation samples.
SHAPES_VALIDATION_PROMPT = "a yellow triangle on a blue background"


def _caption(shape: str, color: str, background: str) -> str:
    return f"a {color} {shape} on a {background} background"


def render_shape_example(rng: random.Random, size: int = 64) -> tuple[Image.Image, str]:
    """Draw one random shape image of ``size`` x ``size`` pixels and return it with its caption.

    All randomness comes from ``rng``, so a seeded ``random.Random`` gives the same image.
    """
    shape = rng.choice(SHAPES)
    color, background = rng.sample(sorted(COLORS), 2)  # never the same as the background

    image = Image.new("RGB", (size, size), COLORS[background])
    draw = ImageDraw.Draw(image)
    # The shape covers 40-70% of the side and is jittered around the centre, so the data set
    # is not 3 x 56 identical images, yet the shape always stays fully visible.
    extent = rng.uniform(0.4, 0.7) * size
    cx = size / 2 + rng.uniform(-0.12, 0.12) * size
    cy = size / 2 + rng.uniform(-0.12, 0.12) * size
    left, top, right, bottom = cx - extent / 2, cy - extent / 2, cx + extent / 2, cy + extent / 2
    fill = COLORS[color]
    if shape == "circle":
        draw.ellipse((left, top, right, bottom), fill=fill)
    elif shape == "square":
        draw.rectangle((left, top, right, bottom), fill=fill)
    else:
        draw.polygon([(cx, top), (right, bottom), (left, bottom)], fill=fill)
    return image, _caption(shape, color, background)


def _write_dataset(directory: Path, n: int, size: int, seed: int) -> None:
    rng = random.Random(seed)
    lines = []
    for index in range(n):
        image, text = render_shape_example(rng, size)
        file_name = f"{index:05d}.png"
        # No metadata chunks and a fixed compress level: the PNG bytes depend only on the
        # pixels, which makes the files byte-identical for a given seed.
        image.save(directory / file_name, format="PNG", optimize=False, compress_level=6)
        lines.append(json.dumps({"file_name": file_name, "text": text}))
    (directory / "metadata.jsonl").write_text("\n".join(lines) + "\n")


#: The largest --resolution a --demo run draws its shapes at: the demo is a tiny random model meant to train in
#: about a minute (64 px); far beyond this the generated images alone would not fit in memory.
MAX_DEMO_RESOLUTION = 1024
MIN_DEMO_RESOLUTION = 8


def check_demo_resolution(resolution: int) -> None:
    """Refuse (one paragraph) a ``--resolution`` the ``--demo`` shapes are not drawn at, before anything is built."""
    if MIN_DEMO_RESOLUTION <= resolution <= MAX_DEMO_RESOLUTION:
        return
    raise UserError(
        f"--resolution {resolution} is outside what --demo is for ({MIN_DEMO_RESOLUTION} to {MAX_DEMO_RESOLUTION} "
        f"px): the demo trains a tiny random model on generated shapes drawn at --resolution (its config uses 64). "
        f"Use a --resolution from {MIN_DEMO_RESOLUTION} to {MAX_DEMO_RESOLUTION}, or --demo false to train a real "
        f"model at this size."
    )


def make_shapes_dataset(directory: str | Path, n: int = 32, size: int = 64, seed: int = 0) -> Path:
    """Write ``n`` PNG images of coloured shapes and their captions into ``directory``.

    The layout is an ``imagefolder`` data set: ``00000.png`` ... and ``metadata.jsonl`` with
    ``{"file_name": "00000.png", "text": "a red circle on a blue background"}`` lines.
    Deterministic for a given ``(n, size, seed)`` (same bytes), idempotent (a matching
    existing data set is left untouched) and written atomically (built in a temporary
    sibling directory, then renamed), so concurrent callers are safe.  Returns the directory.
    """
    if n < 1 or size < 8:
        raise ValueError(f"need n >= 1 and size >= 8, got n={n}, size={size}")
    marker = {"kind": "shapes", "n": n, "size": size, "seed": seed, "version": SHAPES_DATASET_VERSION}
    return build_directory_atomically(directory, SHAPES_MARKER, marker, lambda tmp: _write_dataset(tmp, n, size, seed))


SHAPES_CLASS_MARKER = "dit_lora_shape_classes.json"


def _write_class_dataset(directory: Path, n: int, size: int, seed: int) -> None:
    rng = random.Random(seed)
    for index in range(n):
        image, text = render_shape_example(rng, size)
        shape = next(s for s in SHAPES if f" {s} " in f" {text} ")
        folder = directory / shape
        folder.mkdir(exist_ok=True)
        image.save(folder / f"{index:05d}.png", format="PNG", optimize=False, compress_level=6)


def make_shapes_class_dataset(directory: str | Path, n: int = 32, size: int = 64, seed: int = 0) -> Path:
    """Write ``n`` shape images sorted into one sub-folder per class (``circle/``, ``square/``, ``triangle/``).

    The ``imagefolder``-by-class layout (no metadata file): the label of an image is the name of its
    folder, which is what class-conditional training (DiT) reads. Same drawing as
    :func:`make_shapes_dataset` (the colours vary within a class); deterministic, idempotent and atomic.
    """
    if n < 1 or size < 8:
        raise ValueError(f"need n >= 1 and size >= 8, got n={n}, size={size}")
    marker = {"kind": "shape_classes", "n": n, "size": size, "seed": seed, "version": SHAPES_DATASET_VERSION}
    return build_directory_atomically(
        directory, SHAPES_CLASS_MARKER, marker, lambda tmp: _write_class_dataset(tmp, n, size, seed)
    )
