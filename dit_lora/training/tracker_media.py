"""Validation samples to the experiment trackers (``--report_to tensorboard`` or ``wandb``), beside the scalars the loop
logs: each prompt's images side by side, its first clip as an animation, a video LLM's answer as text, tagged
``validation/p<k>`` at the step they were drawn (the final samples at the last step, tagged ``final/p<k>``); the
prompts themselves once, as text.

TensorBoard shows animations as GIF images (its own ``add_video`` needs moviepy, which dit-lora does not install):
the clip is written as a GIF with PIL and handed to TensorBoard as an encoded image summary, the form ``add_video``
produces. wandb gets ``wandb.Image`` and, for a clip, the MP4 file the run wrote (``wandb.Video`` of a path needs no
encoder). What neither can show (another kind of sample) is left to the files in ``samples/``.
"""

from __future__ import annotations

import io
from collections.abc import Sequence
from pathlib import Path
from typing import Any

#: a clip's animation: at most this many frames (a validation clip has tens; the tracker keeps every step's)
MAX_GIF_FRAMES = 49


def log_samples(
    accelerator,
    section: str,
    prompts: Sequence[str],
    made: Sequence[Sequence[Any]],
    files: Sequence[Path],
    step: int,
    fps: float = 8.0,
) -> None:
    """Log ``made[k]`` (the samples of ``prompts[k]``, written as ``files``) to each of ``accelerator``'s trackers
    under ``<section>/p<k>`` at ``step``. The main process only; a tracker of another kind is left alone."""
    for tracker in getattr(accelerator, "trackers", []):
        name = getattr(tracker, "name", None)
        if name == "tensorboard":
            _to_tensorboard(tracker.tracker, section, prompts, made, step, fps)
        elif name == "wandb":
            _to_wandb(tracker, section, prompts, made, files, step)


def _kind(items: Sequence[Any]) -> str | None:
    """``image``, ``clip`` (a list of frames), ``text``, or None (nothing a tracker shows)."""
    from PIL import Image

    if not items:
        return None
    first = items[0]
    if isinstance(first, Image.Image):
        return "image"
    if isinstance(first, str):
        return "text"
    if isinstance(first, (list, tuple)) and first and isinstance(first[0], Image.Image):
        return "clip"
    return None


def side_by_side(images: Sequence[Any]):
    """The images in one row (RGB), top-aligned on white."""
    from PIL import Image

    width, height = sum(i.width for i in images), max(i.height for i in images)
    row = Image.new("RGB", (width, height), "white")
    left = 0
    for image in images:
        row.paste(image.convert("RGB"), (left, 0))
        left += image.width
    return row


def gif_bytes(frames: Sequence[Any], fps: float) -> bytes:
    """The frames as a looping GIF at ``fps`` (at most MAX_GIF_FRAMES of them, evenly spread)."""
    step = max(1, -(-len(frames) // MAX_GIF_FRAMES))
    kept = [frame.convert("RGB") for frame in frames[::step]]
    buffer = io.BytesIO()
    # milliseconds a frame, in GIF's whole hundredths of a second; readers slow anything under 20 ms down
    duration = max(20, 10 * round(100 * step / fps))
    kept[0].save(buffer, format="GIF", save_all=True, append_images=kept[1:], duration=duration, loop=0)
    return buffer.getvalue()


def _to_tensorboard(writer, section: str, prompts, made, step: int, fps: float) -> None:
    """Each prompt's samples on ``writer`` (torch's SummaryWriter, as accelerate's tracker holds it)."""
    import numpy as np

    writer.add_text(f"{section}/prompts", "\n\n".join(f"p{k}: {p}" for k, p in enumerate(prompts)), step)
    for k, items in enumerate(made):
        tag, kind = f"{section}/p{k}", _kind(items)
        if kind == "image":
            writer.add_image(tag, np.asarray(side_by_side(items)), step, dataformats="HWC")
        elif kind == "clip":
            _add_gif(writer, tag, items[0], step, fps)
        elif kind == "text":
            writer.add_text(tag, "\n\n".join(items), step)


def _add_gif(writer, tag: str, frames, step: int, fps: float) -> None:
    """A clip as TensorBoard's image summary holding a GIF (what ``SummaryWriter.add_video`` writes)."""
    from tensorboard.compat.proto.summary_pb2 import Summary

    width, height = frames[0].size
    image = Summary.Image(height=height, width=width, colorspace=3, encoded_image_string=gif_bytes(frames, fps))
    writer._get_file_writer().add_summary(Summary(value=[Summary.Value(tag=tag, image=image)]), step)


def _to_wandb(tracker, section: str, prompts, made, files, step: int) -> None:
    """Each prompt's samples as wandb media (its clips from the MP4 files the run wrote)."""
    import wandb

    videos = iter([f for f in files if Path(f).suffix == ".mp4"])
    values: dict[str, Any] = {}
    for k, (prompt, items) in enumerate(zip(prompts, made, strict=True)):
        kind = _kind(items)
        if kind == "image":
            values[f"{section}/p{k}"] = [wandb.Image(item, caption=prompt) for item in items]
        elif kind == "clip":
            values[f"{section}/p{k}"] = [wandb.Video(str(next(videos)), caption=prompt) for _ in items]
        elif kind == "text":
            values[f"{section}/p{k}"] = wandb.Html("<br>".join(f"<b>{prompt}</b>: {t}" for t in items))
    if values:
        tracker.log(values, step=step)
