"""What ``dit-lora caption`` captions: the images and clips of a folder, listed and decoded as training lists and
decodes them.

* :func:`list_media` walks the folder as a data folder is walked (:class:`~dit_lora.data.paths.FolderWalk`: hidden
  files skipped, links never followed out of it, names sorted), keeping the image families' extensions and the video
  extensions; a single file is a listing of one.
* :func:`read_media` gives the frames a video LLM sees: a clip's ``num_frames`` frames at the centres of equal
  segments with their true times (:func:`~dit_lora.families.videollm.frames.read_clip`, as the video-LLM families
  train, upright per the clip's rotation), an image as a one-frame clip decoded as the image families decode it
  (:func:`~dit_lora.families.videollm.frames.read_image`: EXIF orientation, colour profile, transparency on white).
"""

from __future__ import annotations

import dataclasses
import math
import os
import posixpath
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
from PIL import Image

from dit_lora.core.errors import UserError
from dit_lora.data.paths import FolderWalk, printable
from dit_lora.data.video_sample import CLIP_IMAGE_EXTENSIONS, VIDEO_EXTENSIONS
from dit_lora.families.videollm.frames import SampledClip, read_clip

__all__ = ["MEDIA_EXTENSIONS", "MediaFile", "list_media", "read_media"]

#: what is captioned: the image families' extensions and the video families' (an animated GIF is a clip)
MEDIA_EXTENSIONS = CLIP_IMAGE_EXTENSIONS | VIDEO_EXTENSIONS


@dataclass(frozen=True)
class MediaFile:
    """One file to caption: ``key`` relative to the listed folder ("/"-separated), ``path`` on disk."""

    key: str
    path: Path

    @property
    def is_image(self) -> bool:
        """An image (captioned as a one-frame clip), not a video."""
        return self.path.suffix.lower() in CLIP_IMAGE_EXTENSIONS

    @property
    def kind(self) -> str:
        """``image`` or ``video``: which default prompt it gets."""
        return "image" if self.is_image else "video"


def list_media(path: Path, log: Callable[[str], Any]) -> tuple[Path, list[MediaFile]]:
    """The folder captions are written under, and its images and clips in name order (a single file: its folder,
    and that file). A path that does not exist, or a folder holding no media, is one paragraph."""
    if not path.exists():
        raise UserError(f"dit-lora caption: `{path}` does not exist. Pass the folder of images and clips to caption.")
    if path.is_file():
        if path.suffix.lower() not in MEDIA_EXTENSIONS:
            raise UserError(_not_media(path))
        return path.parent, [MediaFile(path.name, path)]
    walk = FolderWalk(path)
    found = [
        MediaFile(posixpath.join(rel_dir, name) if rel_dir else name, Path(dirpath) / name)
        for dirpath, rel_dir, _, names in walk
        for name in names
        if os.path.splitext(name)[1].lower() in MEDIA_EXTENSIONS
    ]
    walk.report(log, flag="PATH", noun="file")
    if not found:
        raise UserError(
            f"dit-lora caption: `{path}` holds no image or clip (looked for {', '.join(sorted(MEDIA_EXTENSIONS))} in "
            "it and its subfolders, case-insensitive; hidden files are skipped). Pass the folder your training data "
            "is in."
        )
    return path, found


def _not_media(path: Path) -> str:
    return (
        f"dit-lora caption: `{printable(str(path))}` is not an image or a clip (by its extension; captioned are "
        f"{', '.join(sorted(MEDIA_EXTENSIONS))}). Pass one of those, or the folder that holds them."
    )


def read_media(item: MediaFile, num_frames: int, max_pixels: int = 0) -> SampledClip:
    """The frames ``item`` is captioned from, as the video-LLM families read a training file: a clip's
    ``num_frames`` sampled frames with their rate and times, an image as one frame at second 0; frames larger than
    ``max_pixels`` (0: no limit) scaled down to it, aspect kept (bilinear, on the decoded RGB).

    Raises:
        VideoDecodeError: the file cannot be decoded; ``str(err)`` says why.
    """
    clip = read_clip(item.path, num_frames)
    return clip if not max_pixels else fit_pixels(clip, max_pixels)


def fit_pixels(clip: SampledClip, max_pixels: int) -> SampledClip:
    """``clip`` with each frame scaled down to at most ``max_pixels`` pixels, aspect kept (unchanged when smaller)."""
    _, height, width, _ = clip.frames.shape
    if height * width <= max_pixels:
        return clip
    scale = math.sqrt(max_pixels / (height * width))
    size = (max(1, int(width * scale)), max(1, int(height * scale)))
    frames = np.stack([np.asarray(Image.fromarray(f).resize(size, Image.Resampling.BILINEAR)) for f in clip.frames])
    return dataclasses.replace(clip, frames=frames)
