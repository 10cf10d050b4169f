"""A tiny captioned video data set: a coloured square moving across a plain background (no downloads).

``make_moving_square_dataset(root)`` writes ``root/clip_00000.mp4 ...`` (PyAV encode, H.264 via
libx264 when this PyAV build has it, else MPEG-4 Part 2) plus captions, either as
``metadata.jsonl`` (``{"file_name", "text"}``; ``layout="metadata"``) or as the CogVideoX /
finetrainers ``prompts.txt`` + ``videos.txt`` pair (``layout="txt"``). Captions name colour and
direction ("a red square moving left to right"). Everything is derived from ``seed``. With ``sound`` the clips carry
an AAC track, a sine whose pitch is the square's colour's (:data:`CLIP_TONES`), for the families that train a clip's
sound with its frames; ``"mixed"`` leaves every second clip without one.

:func:`write_corrupt_clip` and :func:`write_truncated_clip` make broken files for tests.
"""

from __future__ import annotations

import json
import os
import random
import shutil
from pathlib import Path

import numpy as np

from dit_lora.core.errors import UserError
from dit_lora.data.synthetic import build_directory_atomically
from dit_lora.output.video import pick_video_codec, write_video

__all__ = [
    "build_demo_clips",
    "CLIP_COLORS",
    "CLIP_TONES",
    "DIRECTIONS",
    "make_moving_square_dataset",
    "pick_video_codec",
    "write_corrupt_clip",
    "write_moving_square_clip",
    "write_truncated_clip",
]

CLIP_COLORS: dict[str, tuple[int, int, int]] = {
    "red": (220, 30, 30),
    "green": (30, 170, 60),
    "blue": (30, 60, 220),
    "yellow": (240, 220, 30),
}
DIRECTIONS = ("left to right", "right to left", "top to bottom", "bottom to top")
#: each colour's pitch in Hz (a clip's sound says its colour, as its caption does)
CLIP_TONES: dict[str, float] = {"red": 330.0, "green": 440.0, "blue": 550.0, "yellow": 660.0}
#: what ``make_moving_square_dataset(sound=...)`` takes
SOUNDS = ("none", "tones", "mixed")
_BACKGROUND = (20, 20, 20)


def _frames(
    color: tuple[int, int, int], direction: str, num_frames: int, size: int, outline: bool = False
) -> list[np.ndarray]:
    """The square's frames; ``outline``: its edges alone, white on black (an edge map, what an in-context
    LoRA's reference clip often is)."""
    side = max(4, size // 4)
    travel = size - side
    frames = []
    for i in range(num_frames):
        t = i / (num_frames - 1) if num_frames > 1 else 0.0
        pos = int(round(t * travel))
        if direction in ("right to left", "bottom to top"):
            pos = travel - pos
        mid = (size - side) // 2
        x, y = (pos, mid) if direction in ("left to right", "right to left") else (mid, pos)
        frame = np.empty((size, size, 3), dtype=np.uint8)
        frame[:] = 0 if outline else _BACKGROUND
        frame[y : y + side, x : x + side] = 255 if outline else color
        if outline:
            frame[y + 2 : y + side - 2, x + 2 : x + side - 2] = 0
        frames.append(frame)
    return frames


def write_moving_square_clip(
    path: str | os.PathLike,
    *,
    color: str = "red",
    direction: str = "left to right",
    num_frames: int = 9,
    size: int = 64,
    fps: int = 8,
    tone: float | None = None,
    audio_rate: int = 16000,
    outline: bool = False,
) -> Path:
    """Encode one ``size`` x ``size`` clip of ``num_frames`` frames at ``fps`` to ``path`` (MP4); with ``tone``, an
    AAC track of a sine at ``tone`` Hz (amplitude 0.5, stereo, ``audio_rate``) over the frames' span; ``outline``:
    the square's edges alone, white on black."""
    if direction not in DIRECTIONS:
        raise ValueError(f"direction must be one of {DIRECTIONS}, got {direction!r}")
    if size % 2:
        raise ValueError("size must be even (yuv420p)")
    # crf 12 keeps the square's edges crisp; faststart puts the index (moov) first, as web-ready files
    # have it, so cutting the file short leaves a container that opens but breaks off mid-stream (a
    # realistic truncated download).
    audio = None
    if tone is not None:
        t = np.arange(round(num_frames / fps * audio_rate)) / audio_rate
        wave = (0.5 * np.sin(2 * np.pi * tone * t)).astype(np.float32)
        audio = (np.stack([wave, wave]), audio_rate)
    frames = _frames(CLIP_COLORS[color], direction, num_frames, size, outline)
    return write_video(frames, path, fps=fps, crf=12, faststart=True, audio=audio)


def make_moving_square_dataset(
    root: str | os.PathLike,
    n: int = 8,
    num_frames: int = 9,
    size: int = 64,
    fps: int = 8,
    seed: int = 0,
    layout: str = "metadata",
    sound: str = "none",
    references: bool = False,
) -> Path:
    """Write ``n`` moving-square clips and their captions into folder ``root`` (created if needed).

    ``sound``: ``"none"`` (no audio track), ``"tones"`` (each clip its colour's tone, :data:`CLIP_TONES`) or
    ``"mixed"`` (the tone on clips 0, 2, 4 ..., no track on the others). ``references``: each clip's reference clip
    too, its square's moving outline (``references/``, named in the rows' ``reference_path``: an in-context data set).

    ``layout="metadata"`` writes ``metadata.jsonl`` (``file_name``, ``text``); ``layout="txt"``
    writes ``prompts.txt`` and ``videos.txt`` (one line per clip, paired by line). Colour and
    direction of clip ``i`` come from ``random.Random(seed)``; clips of the same colour and direction are the
    same bytes (one encode, copied). Across calls the frames are identical for equal arguments, the encoded
    bytes almost always (libx264 gave other bytes for about one encode in 30 here, even on one thread).
    """
    if layout not in ("metadata", "txt"):
        raise ValueError(f"layout must be 'metadata' or 'txt', got {layout!r}")
    if sound not in SOUNDS:
        raise ValueError(f"sound must be one of {SOUNDS}, got {sound!r}")
    root = Path(root)
    root.mkdir(parents=True, exist_ok=True)
    rng = random.Random(seed)
    rows = []
    written: dict[tuple[str, str, bool], Path] = {}
    for i in range(n):
        color = rng.choice(sorted(CLIP_COLORS))
        direction = rng.choice(DIRECTIONS)
        name = f"clip_{i:05d}.mp4"
        sounding = sound == "tones" or (sound == "mixed" and i % 2 == 0)
        key = (color, direction, sounding)
        if key in written:  # the same clip: the same bytes (libx264 is not bit-stable run to run)
            shutil.copyfile(written[key], root / name)
        else:
            written[key] = write_moving_square_clip(
                root / name,
                color=color,
                direction=direction,
                num_frames=num_frames,
                size=size,
                fps=fps,
                tone=CLIP_TONES[color] if sounding else None,
            )
        rows.append((name, f"a {color} square moving {direction}"))
        if references:
            (root / "references").mkdir(exist_ok=True)
            write_moving_square_clip(
                root / "references" / name, direction=direction, num_frames=num_frames, size=size, fps=fps, outline=True
            )
    if layout == "metadata":
        with open(root / "metadata.jsonl", "w", encoding="utf-8") as handle:
            for name, text in rows:
                extra = {"reference_path": f"references/{name}"} if references else {}
                handle.write(json.dumps({"file_name": name, "text": text, **extra}) + "\n")
    else:
        (root / "prompts.txt").write_text("".join(text + "\n" for _, text in rows), encoding="utf-8")
        (root / "videos.txt").write_text("".join(name + "\n" for name, _ in rows), encoding="utf-8")
    return root


def build_demo_clips(
    folder: str | os.PathLike,
    *,
    n: int,
    num_frames: int,
    size: int,
    fps: int,
    sound: str = "none",
    references: bool = False,
) -> None:
    """Build (or keep) the moving-squares clips a video family's ``--demo`` trains on in ``folder``
    (``--train_data_dir``): atomically, with a marker naming what was built, never over the user's own files
    (a folder that holds other data is refused in one paragraph). ``sound``: as :func:`make_moving_square_dataset`."""
    marker = {"kind": "moving_squares", "n": n, "num_frames": num_frames, "size": size, "fps": fps, "seed": 0}
    if sound != "none":  # the marker of a silent set is unchanged: folders built before sound existed are kept
        marker["sound"] = sound
    if references:
        marker["references"] = True
    try:
        build_directory_atomically(
            folder,
            "dit_lora_clips.json",
            marker,
            lambda tmp: make_moving_square_dataset(
                tmp, n=n, num_frames=num_frames, size=size, fps=fps, seed=0, sound=sound, references=references
            ),
        )
    except FileExistsError as err:
        raise UserError(f"--demo: {err}. Choose another --train_data_dir for the demo clips.")


def write_corrupt_clip(path: str | os.PathLike, *, size: int = 4096, seed: int = 0) -> Path:
    """Random bytes under a video name: not a readable video."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(random.Random(seed).randbytes(size))
    return path


def write_truncated_clip(source: str | os.PathLike, path: str | os.PathLike, *, keep: float = 0.5) -> Path:
    """Copy the first ``keep`` fraction of ``source``'s bytes to ``path`` (a download cut short)."""
    data = Path(source).read_bytes()
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data[: int(len(data) * keep)])
    return path
