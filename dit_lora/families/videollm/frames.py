"""The frames a video LLM sees of one clip: which ones (VideoChat2's segment centres), decoded with the rate they
were sampled at. Read by :mod:`dit_lora.families.videollm.data` (which re-exports these names), the dataset and
check-data.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

import numpy as np

from dit_lora.data.decode import load_rgb
from dit_lora.data.video import VideoDecodeError, VideoSample, decode_frames_at, describe_error, quarter_turns
from dit_lora.data.video_sample import is_image_file

__all__ = ["MAX_IMAGE_PIXELS", "SampledClip", "read_clip", "read_image", "read_frames", "sample_frame_indices"]

#: the largest image decoded as a one-frame clip (PIL's own bomb limit: the model's preprocessing shrinks it anyway)
MAX_IMAGE_PIXELS = 178_956_970


def sample_frame_indices(total_frames: int, num_frames: int) -> list[int]:
    """The frame of the middle of each of ``num_frames`` equal segments of a ``total_frames`` clip.

    VideoChat2's uniform sampling: the whole clip is covered whatever its length, and neither the
    first nor the last frame is favoured (unlike :mod:`dit_lora.data.video`'s ``start="uniform"``,
    which includes both ends). A clip shorter than ``num_frames`` gives repeated indices, still
    ``num_frames`` of them and non-decreasing. Exact integer arithmetic: segment ``i`` spans
    ``[i*T/N, (i+1)*T/N)`` and its centre ``(2i+1)*T/(2N)`` is rounded down, which stays below T.

    Raises:
        ValueError: ``total_frames`` or ``num_frames`` is below 1.
    """
    if total_frames < 1:
        raise ValueError(f"total_frames must be >= 1, got {total_frames}")
    if num_frames < 1:
        raise ValueError(f"num_frames must be >= 1, got {num_frames}")
    return [(2 * i + 1) * total_frames // (2 * num_frames) for i in range(num_frames)]


def _file_problem(path: str) -> str | None:
    """Why ``path`` cannot be a video file before opening it (folder, empty, missing), or None."""
    try:
        if os.path.isdir(path):
            return "is a folder, not a video file"
        if os.path.getsize(path) == 0:
            return "empty file (0 bytes)"
    except FileNotFoundError:
        return "file not found"
    except OSError as err:
        return f"unreadable ({describe_error(err)})"
    return None


def _decode_indices(path: str, indices: list[int]) -> tuple[np.ndarray | None, int]:
    """Decode up to ``indices[-1]``: the frames at ``indices`` (None if the stream ended first) and the count decoded."""
    size: list[int] = []

    def rgb(frame) -> np.ndarray:
        # A stream may change resolution midway; the model needs one frame size (the first kept frame's).
        if not size:
            size.extend((int(frame.width), int(frame.height)))
        array = frame.to_ndarray(format="rgb24", width=size[0], height=size[1])
        turns = quarter_turns(frame)  # upright as players show it (a phone's portrait clip), as the DiTs decode
        return np.ascontiguousarray(np.rot90(array, k=turns)) if turns else array

    kept, seen = decode_frames_at(path, indices, rgb)
    if len(kept) < len(set(indices)):
        return None, seen
    return np.stack([kept[i] for i in indices]), seen


@dataclass(frozen=True)
class SampledClip:
    """The frames a model sees of one clip, and the rate they were sampled at.

    ``frames`` is uint8 ``(num_frames, H, W, 3)`` RGB. ``fps`` is frames per second of clip time,
    ``num_frames / total_frames * stream_fps`` (transformers' ``VideoMetadata.sampled_fps``): 8 frames
    spread over a 30 s clip are 0.267 fps, whatever the stream's own rate. None when the container
    states no frame rate.

    ``times`` is each frame's second in the clip, its index in the stream over the stream's rate
    (transformers' ``VideoMetadata.timestamps``: ``frames_indices / fps``), what Qwen3-VL writes in its
    prompt; None when the container states no frame rate.
    """

    frames: np.ndarray
    fps: float | None
    times: tuple[float, ...] | None = None


def read_clip(video: str | os.PathLike, num_frames: int) -> SampledClip:
    """Decode the ``num_frames`` frames :func:`sample_frame_indices` picks, with the rate they were sampled at.

    An image (the image families' extensions, not .gif) is a one-frame clip (:func:`read_image`), whatever
    ``num_frames``. Frames keep the clip's own size (the model's processor resizes them), turned upright per the clip's rotation
    metadata. The frame count comes
    from the container (header, else a packet count); if the stream ends before it says, by a
    frame or two as edit lists and B-frame delays cause, the indices are re-picked from the frames
    that actually decode; a bigger gap means a truncated file. Decodes only up to the last frame
    needed. Deterministic.

    Raises:
        VideoDecodeError: missing, folder, empty, not a video, no video stream, no decodable frame,
            or truncated / damaged (``str(err)`` is the reason).
        ValueError: ``num_frames`` is below 1.
    """
    if num_frames < 1:
        raise ValueError(f"num_frames must be >= 1, got {num_frames}")
    path = os.fspath(video)
    if is_image_file(path):
        return read_image(path)
    problem = _file_problem(path)
    if problem is not None:
        raise VideoDecodeError(problem)
    info = VideoSample(key=path, caption="", path=path).probe()
    declared = info.num_frames
    if declared < 1:
        raise VideoDecodeError("no frames (the video stream is empty)")
    indices = sample_frame_indices(declared, num_frames)
    frames, seen = _decode_indices(path, indices)
    total = declared
    if frames is None:
        if seen == 0:
            raise VideoDecodeError(f"no decodable frames (the header declares {declared})")
        # The same tolerance as dit_lora.data.video.scan_clip: only a real gap is truncation.
        if seen < declared - max(2, declared // 50):
            raise VideoDecodeError(f"truncated (header declares {declared} frames, only {seen} decode)")
        indices = sample_frame_indices(seen, num_frames)
        frames, _ = _decode_indices(path, indices)
        if frames is None:  # the stream got shorter between two reads of the same file
            raise VideoDecodeError(f"frame count changed while reading (first {seen} frames decoded)")
        total = seen
    if info.fps <= 0:  # no rate: no time is assumed
        return SampledClip(frames, None)
    return SampledClip(frames, num_frames / total * info.fps, tuple(i / info.fps for i in indices))


def read_image(path: str | os.PathLike) -> SampledClip:
    """An image as a one-frame clip at second 0 with no rate (it has no motion), decoded as the image families
    decode it (:func:`~dit_lora.data.decode.load_rgb`: EXIF orientation, colour profile, transparency on white).

    Raises:
        VideoDecodeError: missing, unreadable or corrupt (``str(err)`` is the reason).
    """
    problem = _file_problem(os.fspath(path))
    if problem is not None:
        raise VideoDecodeError(problem)
    try:
        image = load_rgb(os.fspath(path), max_pixels=MAX_IMAGE_PIXELS)
    except Exception as err:  # PIL's errors share no base class: each becomes the file's reason
        raise VideoDecodeError(f"not a readable image ({describe_error(err)})") from None
    try:
        frame = np.array(image.convert("RGB"), dtype=np.uint8)
    finally:
        image.close()
    return SampledClip(frame[None], None, (0.0,))


def read_frames(video: str | os.PathLike, num_frames: int) -> np.ndarray:
    """The frames of :func:`read_clip`: uint8 ``(num_frames, H, W, 3)`` RGB."""
    return read_clip(video, num_frames).frames
