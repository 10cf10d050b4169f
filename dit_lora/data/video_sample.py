"""One video training sample: :class:`VideoSample` (where the clip is, its caption, its bucket), what probing it
learns (:class:`VideoInfo`) and the error a clip that cannot be read raises (:class:`VideoDecodeError`).

Below both :mod:`.video_sources` (which lists clips) and :mod:`.video` (which decodes and validates them, and
re-exports these names), so neither imports the other's way round. PyAV is imported on use (:func:`_av`).
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any, NamedTuple

from dit_lora.data.sources import IMAGE_EXTENSIONS, RawSample

VIDEO_EXTENSIONS = frozenset({".mp4", ".mov", ".webm", ".mkv", ".avi", ".gif"})
#: files of a video dataset that are images, trained as one-frame clips: the image families' extensions but .gif
#: (an animated GIF is a clip, decoded by FFmpeg)
CLIP_IMAGE_EXTENSIONS = IMAGE_EXTENSIONS - VIDEO_EXTENSIONS


def is_image_file(path: str | os.PathLike | None) -> bool:
    """Whether a video dataset's file is an image (a one-frame clip), judged by its extension."""
    if not path:
        return False
    return os.path.splitext(os.fspath(path))[1].lower() in CLIP_IMAGE_EXTENSIONS


class VideoDecodeError(ValueError):
    """A clip that cannot give the frames asked of it; ``str(err)`` is a short reason."""


class VideoInfo(NamedTuple):
    """What :meth:`VideoSample.probe` learns about a clip without decoding it (where possible)."""

    num_frames: int
    fps: float
    width: int
    height: int


@dataclass(frozen=True)
class VideoSample:
    """One training clip before any pixel work: where the video is and its caption.

    ``key`` is what humans see in logs: the clip's path relative to ``--train_data_dir`` (posix
    separators). ``path`` is absolute. ``index`` is the position after loading/validation.
    """

    key: str
    caption: str
    path: str
    index: int = 0
    #: (frames, height, width) the clip is decoded to; set by :func:`validate_video_samples` with ``buckets``
    bucket: tuple[int, int, int] | None = None
    #: why the file is never opened (its written path leaves the data folder, :mod:`.paths`), or None
    refused: str | None = None
    #: (height, width) of its decoded frames as displayed (after rotation metadata), set with ``bucket``: what the
    #: bucket was chosen for and what the log's cropped share is measured on
    source_size: tuple[int, int] | None = None
    #: the counter-clockwise turn (0, 90, 180, 270) its rotation metadata asks for, set with ``bucket``: frames are
    #: decoded upright, so a turned clip's cache entry is named apart from one cached before that (:meth:`cache_key`)
    rotation: int = 0
    #: which copy of a repeated clip this is (a kohya ``N_words/`` folder lists each clip N times): 0 for the first;
    #: the copies share key, file, caption and bucket, so one cache entry (:meth:`cache_key` ignores it)
    repeat: int = 0
    #: frames that decode and the stream's frame rate (0 unknown), set with ``bucket``: what the log's effective
    #: sampling rate (``--frame_sampling``) is measured on
    source_frames: int = 0
    source_fps: float = 0.0
    #: the files of the clips it is conditioned on besides its caption (an in-context model's reference clip, named by
    #: a metadata column the family reads), absolute paths inside the data folder; hashed into :meth:`content_id`
    conditions: tuple[str, ...] = ()
    #: which set of a dataset config (``--dataset_config``, :mod:`dit_lora.data.data_sets`) it belongs to: 0 without one
    data_set: int = 0

    def content_id(self) -> str:
        """sha256 hex digest of the clip's file bytes plus the caption (plus the bytes of each of its
        :attr:`conditions`: a changed reference clip is a new cache entry).

        Exactly :meth:`RawSample.content_id`'s scheme for a file (its size as 8 little-endian bytes,
        the bytes, then the length-prefixed UTF-8 caption), computed by that very method, so a
        cache keyed on it treats images and videos alike and survives renames.
        """
        return RawSample(
            key=self.key, caption=self.caption, path=self.path, refused=self.refused, conditions=self.conditions
        ).content_id()

    def cache_key(self) -> str:
        """What names this clip's latent-cache entry: its content id plus its bucket, ``<sha256>:FxHxW``.

        Changing ``--max_num_frames``/``--height``/``--width`` or ``--frame_buckets`` thus re-encodes
        only the clips whose bucket changed.

        Raises:
            ValueError: the clip has no bucket yet (it is assigned during validation).
        """
        if self.bucket is None:
            raise ValueError(f"clip {self.key!r} has no bucket (frames, height, width) assigned yet")
        frames, height, width = self.bucket
        turned = f":r{self.rotation}" if self.rotation else ""  # upright frames differ from the stored ones
        return f"{self.content_id()}:{frames}x{height}x{width}{turned}"

    def display_name(self) -> str:
        """How reports name this clip: its file."""
        return str(self.path) if self.path else self.key

    @property
    def is_image(self) -> bool:
        """An image file (:data:`CLIP_IMAGE_EXTENSIONS`): a one-frame clip, bucketed ``(1, h, w)``."""
        return is_image_file(self.path or self.key)

    def probe(self) -> VideoInfo:
        """Frame count, fps, width and height of the first video stream.

        The frame count comes from the container header (``nb_frames``) when it has one (MP4, MOV,
        AVI); otherwise (WebM, MKV, GIF often lack it) the stream's packets are counted, which
        demuxes the file but decodes nothing. A truncated file can claim more frames in its header
        than it holds: :func:`video_problem` is what decodes and checks.

        Raises:
            VideoDecodeError: no such file, not a video, or no video stream.
        """
        if self.refused is not None:
            raise VideoDecodeError(self.refused)
        av = _av()
        try:
            with av.open(self.path) as container:
                stream = _video_stream(container)
                fps = float(stream.average_rate or stream.guessed_rate or stream.base_rate or 0)
                width, height = stream.codec_context.width, stream.codec_context.height
                count = int(stream.frames or 0)
                if count <= 0:
                    count = sum(1 for packet in container.demux(stream) if packet.size)
                return VideoInfo(count, fps, int(width), int(height))
        except VideoDecodeError:
            raise
        except FileNotFoundError:
            raise VideoDecodeError("file not found") from None
        except (av.FFmpegError, OSError, ValueError) as err:
            raise VideoDecodeError(f"not a readable video ({describe_error(err)})") from None


def _av() -> Any:
    import av  # imported lazily: only video training needs PyAV

    return av


def _video_stream(container: Any) -> Any:
    if not container.streams.video:
        raise VideoDecodeError("has no video stream")
    stream = container.streams.video[0]
    stream.thread_type = "AUTO"  # frame + slice threads; output order and pixels are unchanged
    return stream


def describe_error(err: BaseException) -> str:
    return f"{type(err).__name__}: {' '.join(str(err).split())}"
