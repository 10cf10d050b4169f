"""Video samples for video DiTs (CogVideoX): list clips, check their frame counts, decode, validate.

Nothing in the image path imports it; :mod:`.video_prepare` wires it into training's data
preparation. It mirrors the image data layer:

* :func:`~dit_lora.data.video_sources.load_video_samples` (like :func:`~dit_lora.data.sources.load_samples`,
  importable from here too) lists clips and captions without decoding anything.
* :func:`validate_video_samples` (like :func:`~dit_lora.data.validation.validate_samples`) decodes
  every clip once, skips, names and quarantines the unreadable, truncated or too-short ones, and
  gives each kept clip its (frames, height, width) bucket.
* :func:`decode_clip` turns one clip into an ``(F, 3, H, W)`` float tensor in [-1, 1], resized and
  centre-cropped exactly like :func:`~dit_lora.data.transforms.preprocess_image` does for images.
* The frame-count rule and ``--frame_buckets`` live in :mod:`.frames` (re-exported here).
* An image in a video dataset (:data:`CLIP_IMAGE_EXTENSIONS`) is a one-frame clip: decoded with PIL as the image
  families decode (:func:`~dit_lora.data.decode.load_rgb`: EXIF orientation, transparency on white, pixel budget),
  then resized and cropped by the very function video frames go through, to a ``(1, h, w)`` bucket.

Decoding uses PyAV only (no torchvision, no decord).
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Callable, Sequence
from typing import Any, Literal, NamedTuple, TypeVar

import numpy as np
import torch
from PIL import Image

from dit_lora.data.decode import load_rgb, open_checked, pixel_budget
from dit_lora.data.frames import (
    Bucket,
    check_num_frames,
    choose_bucket,
    frame_rule,
    latent_frames,
    latent_padding,
    one_frame_buckets,
    resolution_buckets,
)
from dit_lora.data.sources import RawSample
from dit_lora.data.transforms import crop_box, resized_size
from dit_lora.data.validation import caption_problem, check_all, image_problem, screen
from dit_lora.data.video_sample import (  # re-exported: the clip itself, below the sources that list clips
    CLIP_IMAGE_EXTENSIONS,
    VIDEO_EXTENSIONS,
    VideoDecodeError,
    VideoInfo,
    VideoSample,
    _av,
    _video_stream,
    describe_error,
    is_image_file,
)
from dit_lora.data.video_sources import load_video_samples  # re-exported: the listing lives there

__all__ = [
    "CLIP_IMAGE_EXTENSIONS",
    "VIDEO_EXTENSIONS",
    "VideoDecodeError",
    "VideoInfo",
    "VideoSample",
    "ClipScan",
    "FrameStart",
    "check_num_frames",
    "choose_bucket",
    "decode_clip",
    "decode_image_clip",
    "is_image_file",
    "frame_rule",
    "frames_flag_for",
    "latent_frames",
    "latent_padding",
    "load_video_samples",
    "one_frame_buckets",
    "resolution_buckets",
    "scan_clip",
    "validate_video_samples",
    "video_problem",
]

#: EXIF orientations that swap width and height (a transpose or a quarter turn; decode._ORIENTATION)
_SWAPPING_ORIENTATIONS = (5, 6, 7, 8)
#: which frames of a longer clip :func:`decode_clip` takes (``--frame_sampling``)
FrameStart = Literal["first", "uniform"]


# ---------------------------------------------------------------------------------------------
# Decoding
# ---------------------------------------------------------------------------------------------


def _frame_indices(total: int, num_frames: int, start: str) -> list[int]:
    if start == "first":
        return list(range(num_frames))
    if num_frames == 1:
        return [0]
    # Evenly spaced, first and last frame included; exact integer arithmetic (no float drift).
    return [(i * (total - 1) * 2 + (num_frames - 1)) // ((num_frames - 1) * 2) for i in range(num_frames)]


T = TypeVar("T")


def decode_frames_at(path: str, indices: Sequence[int], convert: Callable[[Any], T]) -> tuple[dict[int, T], int]:
    """Decode a clip up to ``max(indices)``; return ``{index: convert(frame)}`` for the wanted frames and how
    many frames decoded (fewer entries than wanted when the stream ends first).

    Raises:
        VideoDecodeError: not a readable video, no video stream, or a decode error midway (truncated or damaged).
    """
    av = _av()
    wanted = set(indices)
    last = max(indices)
    kept: dict[int, T] = {}
    seen = 0
    opened = False
    try:
        with av.open(path) as container:
            stream = _video_stream(container)
            opened = True
            for index, frame in enumerate(container.decode(stream)):
                seen = index + 1
                if index in wanted:
                    kept[index] = convert(frame)
                if index >= last:
                    break
    except VideoDecodeError:
        raise
    except FileNotFoundError:
        raise VideoDecodeError("file not found") from None
    except (av.FFmpegError, OSError, ValueError, EOFError) as err:
        if opened:
            raise VideoDecodeError(
                f"truncated or damaged (decode failed after {seen} frame(s): {describe_error(err)})"
            ) from None
        raise VideoDecodeError(f"not a readable video (corrupt, or not a video; {describe_error(err)})") from None
    return kept, seen


def decode_clip(
    path: str | os.PathLike,
    num_frames: int,
    height: int,
    width: int,
    *,
    start: FrameStart = "first",
    max_pixels: int | None = None,
) -> torch.Tensor:
    """Decode ``num_frames`` frames of a clip to a float32 ``(F, 3, height, width)`` tensor in [-1, 1].

    An image file (:func:`is_image_file`) is a one-frame clip: ``num_frames`` must be 1 and the image is decoded
    by :func:`decode_image_clip` (within ``max_pixels``, default the bucket's
    :func:`~dit_lora.data.decode.pixel_budget`); ``start`` does not matter for it.

    ``start="first"`` (default) takes the first ``num_frames`` consecutive frames at the clip's own
    frame rate, as the CogVideoX fine-tuning scripts effectively do with clips prepared at the
    model's rate (8 fps for 1.0, 16 fps for 1.5): motion keeps its real speed whatever the clip
    length, and only the needed frames are decoded. ``start="uniform"`` spreads ``num_frames``
    frames evenly from the first to the last frame (covers the whole clip, but speeds motion up
    by a clip-dependent factor, and decodes the whole clip).

    Each frame is turned upright per the clip's rotation metadata (:func:`upright`, as players show it: a phone's
    portrait clip stays portrait), then resized (bilinear, aspect-preserving cover) and centre-cropped with PIL
    exactly like :func:`~dit_lora.data.transforms.preprocess_image` with ``center_crop=True``. Deterministic: same
    file and arguments, same tensor.

    Raises:
        VideoDecodeError: unreadable, no video stream, fewer frames than needed, or a decode error; for an
            image, more than one frame asked of it.
    """
    if start not in ("first", "uniform"):
        raise ValueError(f"start must be 'first' or 'uniform', got {start!r}")
    if num_frames < 1:
        raise ValueError(f"num_frames must be >= 1, got {num_frames}")
    path = os.fspath(path)
    if is_image_file(path):
        if num_frames != 1:
            raise VideoDecodeError(f"an image is a one-frame clip; it cannot give {num_frames} frames")
        return decode_image_clip(path, height, width, max_pixels=max_pixels)
    total = 0
    if start == "uniform":
        total = VideoSample(key=path, caption="", path=path).probe().num_frames
        if total < num_frames:
            raise VideoDecodeError(f"too short: {total} frame(s), need {num_frames}")
    wanted = _frame_indices(total, num_frames, start)
    last = wanted[-1]
    out = torch.empty((num_frames, 3, height, width), dtype=torch.float32)
    by_index, seen = decode_frames_at(path, wanted, lambda frame: _frame_tensor(upright(frame), height, width))
    if len(by_index) < len(set(wanted)):
        raise VideoDecodeError(f"too short: {seen} decodable frame(s), need {last + 1}")
    for slot, index in enumerate(wanted):
        out[slot] = by_index[index]
    return out


def decode_image_clip(
    path: str | os.PathLike, height: int, width: int, *, max_pixels: int | None = None
) -> torch.Tensor:
    """An image as a one-frame clip: a float32 ``(1, 3, height, width)`` tensor in [-1, 1].

    Decoded exactly as the image families decode (:func:`~dit_lora.data.decode.load_rgb`: EXIF orientation applied,
    transparency composited on white, refused beyond ``max_pixels`` (default: the bucket's
    :func:`~dit_lora.data.decode.pixel_budget`), decoded reduced when far larger than the bucket), then resized
    and centre-cropped by the function every video frame goes through (:func:`_frame_tensor`).

    Raises:
        ImageTooLarge, OSError, PIL's errors: an image beyond the budget, unreadable, truncated or corrupt.
    """
    budget = pixel_budget((height, width), max_pixels)
    image = load_rgb(os.fspath(path), resolution=(height, width), max_pixels=budget)
    try:
        return _frame_tensor(image, height, width)[None]
    finally:
        image.close()


_TURNS = {1: Image.Transpose.ROTATE_90, 2: Image.Transpose.ROTATE_180, 3: Image.Transpose.ROTATE_270}


def quarter_turns(frame: Any) -> int:
    """How many counter-clockwise quarter turns a decoded frame's rotation metadata (its display matrix, PyAV's
    ``VideoFrame.rotation``) asks for, 0-3 (an angle between quarter turns is rounded to the nearest)."""
    return round((getattr(frame, "rotation", 0) or 0) / 90) % 4


def upright(frame: Any) -> Image.Image:
    """A decoded PyAV frame as a PIL image the way players show it: turned per its rotation metadata."""
    image = frame.to_image()
    turns = quarter_turns(frame)
    return image.transpose(_TURNS[turns]) if turns else image


def _frame_tensor(image: Image.Image, height: int, width: int) -> torch.Tensor:
    if image.mode != "RGB":
        image = image.convert("RGB")
    new_w, new_h = resized_size(image.width, image.height, (height, width))
    if (new_w, new_h) != image.size:
        image = image.resize((new_w, new_h), Image.Resampling.BILINEAR)
    box = crop_box(image.size, (height, width), center_crop=True, crop_rng_seed=0)
    if box != (0, 0, image.width, image.height):
        image = image.crop(box)
    pixels = torch.from_numpy(np.array(image, dtype=np.uint8))
    return pixels.permute(2, 0, 1).to(torch.float32).div_(127.5).sub_(1.0)


# ---------------------------------------------------------------------------------------------
# Validation
# ---------------------------------------------------------------------------------------------


class ClipScan(NamedTuple):
    """What decoding a whole clip once found: a problem (or None), the frames that decode and the frame size."""

    problem: str | None
    num_frames: int = 0
    width: int = 0  # as displayed: after the rotation metadata
    height: int = 0
    rotation: int = 0  # the counter-clockwise turn the rotation metadata asks for (0, 90, 180, 270)
    fps: float = 0.0  # the stream's average frame rate (0 when the container does not say)


def image_size(path: str, max_pixels: int | None = None) -> tuple[int, int]:
    """(width, height) of an image as training sees it, from its header: after its EXIF orientation."""
    with open_checked(path, max_pixels) as image:
        width, height = image.size
        orientation = int(image.getexif().get(0x0112) or 1)
    return (height, width) if orientation in _SWAPPING_ORIENTATIONS else (width, height)


def scan_image(sample: VideoSample, *, max_pixels: int | None = None, resolution: Any = None) -> ClipScan:
    """An image of a video dataset decoded once as training will: why it cannot be used (or None), 1 frame, size.

    The reasons are the image families' (:func:`~dit_lora.data.validation.image_problem`: file not found, empty,
    not a readable image, truncated, too large for ``max_pixels``); the size is the oriented one (EXIF applied).
    """
    budget = max_pixels or (pixel_budget(resolution) if resolution is not None else None)
    raw = RawSample(key=sample.key, caption=sample.caption, path=sample.path, refused=sample.refused)
    problem = image_problem(raw, resolution=resolution, max_pixels=budget)
    if problem is not None:
        return ClipScan(problem)
    try:
        width, height = image_size(sample.path, budget)
    except Exception as err:
        return ClipScan(f"unreadable ({describe_error(err)})")
    return ClipScan(None, 1, width, height)


def scan_clip(
    sample: VideoSample,
    min_frames: int = 1,
    *,
    frames_flag: str = "--max_num_frames",
    max_pixels: int | None = None,
    resolution: Any = None,
) -> ClipScan:
    """Decode ``sample``'s whole video stream once: why it cannot be trained on (or None), frames, size.

    An image (:attr:`VideoSample.is_image`) is scanned by :func:`scan_image` (one frame, never too short: it
    trains in a one-frame bucket), within ``max_pixels`` and decoded reduced for ``resolution`` (height, width).

    Reasons: file not found, folder, empty file (0 bytes), not a readable video, no video stream,
    truncated (a decode error after some frames, or far fewer frames than the header declares), too
    short (fewer than ``min_frames`` frames, naming ``frames_flag``, the option that asks for them).
    The frame count is what actually decodes (headers can be wrong), the size is the decoded frames'.
    """
    path = sample.path
    if sample.refused is not None:
        return ClipScan(sample.refused)  # outside the data folder: never opened
    if sample.is_image:
        return scan_image(sample, max_pixels=max_pixels, resolution=resolution)
    try:
        if os.path.isdir(path):
            return ClipScan("is a folder, not a video file")
        if os.path.getsize(path) == 0:
            return ClipScan("empty file (0 bytes)")
    except FileNotFoundError:
        return ClipScan("file not found")
    except OSError as err:
        return ClipScan(f"unreadable ({describe_error(err)})")
    av = _av()
    count = declared = width = height = turns = 0
    fps = 0.0
    opened = False
    try:
        with av.open(path) as container:
            stream = _video_stream(container)
            declared = int(stream.frames or 0)
            fps = float(stream.average_rate or stream.guessed_rate or 0)
            opened = True
            for frame in container.decode(stream):
                frame.to_ndarray(format="rgb24")  # forces a full conversion, as training will
                if not count:  # the size as displayed: a quarter turn swaps it
                    turns = quarter_turns(frame)
                    width, height = (
                        (int(frame.height), int(frame.width)) if turns % 2 else (int(frame.width), int(frame.height))
                    )
                count += 1
    except VideoDecodeError as err:
        return ClipScan(str(err), count, width, height)
    except (av.FFmpegError, OSError, ValueError) as err:
        if opened:
            # The header was fine, the frame data is not: a download cut short, or damage inside.
            of = f" of {declared}" if declared else ""
            return ClipScan(
                f"truncated or damaged (decode failed after {count}{of} frame(s): {describe_error(err)})",
                count,
                width,
                height,
            )
        return ClipScan(f"not a readable video (corrupt, or not a video despite its extension; {describe_error(err)})")
    except Exception as err:
        return ClipScan(f"unreadable ({describe_error(err)})", count, width, height)
    # Headers can be off by a frame or two (edit lists, B-frame delay); only a real gap is truncation.
    if declared and count < declared - max(2, declared // 50):
        return ClipScan(f"truncated (header declares {declared} frames, only {count} decode)", count, width, height)
    if count < min_frames:
        return ClipScan(
            f"too short ({count} frame(s), need at least {min_frames} for {frames_flag})", count, width, height
        )
    return ClipScan(None, count, width, height, 90 * turns, fps)


def video_problem(
    sample: VideoSample, min_frames: int, *, frames_flag: str = "--max_num_frames", max_pixels: int | None = None
) -> str | None:
    """Why ``sample``'s clip cannot be trained on, or None if it decodes with enough frames.

    Decodes the whole video stream once (like validation decodes every image), so a file that
    breaks off mid-stream is caught here rather than in a dataloader worker; see :func:`scan_clip`
    for the reasons.
    """
    return scan_clip(sample, min_frames, frames_flag=frames_flag, max_pixels=max_pixels).problem


def frames_flag_for(buckets: Sequence[Bucket], *, from_buckets: bool) -> str:
    """How a "too short" reason names the option asking for the frames: ``--frame_buckets 9x32x32,...`` or
    ``--max_num_frames 49``."""
    if from_buckets:
        return "--frame_buckets " + ",".join(f"{f}x{h}x{w}" for f, h, w in buckets)
    return f"--max_num_frames {min(b[0] for b in buckets)}" if buckets else "--max_num_frames"


def validate_video_samples(
    samples: Sequence[VideoSample],
    *,
    min_frames: int | None = None,
    buckets: Sequence[Bucket] | None = None,
    frames_flag: str = "--max_num_frames",
    max_bad_samples_fraction: float = 0.05,
    log: Callable[[str], Any] = print,
    quarantine: list[dict[str, Any]] | None = None,
    num_workers: int | None = None,
    require_captions: bool = True,
    raise_on_fraction: bool = True,
    image_buckets: Sequence[Bucket] | None = None,
    max_pixels: int | None = None,
) -> list[VideoSample]:
    """Decode every clip once; drop and report the bad ones; renumber ``index`` 0..N-1.

    Mirrors :func:`~dit_lora.data.validation.validate_samples`: each bad clip (see
    :func:`scan_clip`; plus empty captions with ``require_captions``) is named once in ``log``
    (at most 20 lines, then a count) and appended to ``quarantine`` as ``{"key", "reason"}``.
    Decoding runs in ``num_workers`` threads (default up to 4; FFmpeg releases the GIL).

    With ``buckets`` ((frames, height, width) tuples) every kept clip gets ``bucket`` set by
    :func:`choose_bucket` from its decoded frame count and size (one bucket: every clip gets it),
    and ``min_frames`` defaults to the fewest frames a bucket asks for, so a clip too short for
    every bucket is left out with a reason naming ``frames_flag`` (e.g. ``--frame_buckets ...``).

    An image (:attr:`VideoSample.is_image`) is a one-frame clip: never too short, it gets a one-frame bucket of
    ``image_buckets`` (default :func:`~dit_lora.data.frames.one_frame_buckets` of ``buckets``) by the same aspect
    rule, and is decoded within ``max_pixels`` (default: the largest bucket's
    :func:`~dit_lora.data.decode.pixel_budget`). Whether the model takes one frame is the caller's to check.

    Raises:
        UserError: the bad fraction exceeds ``--max_bad_samples_fraction`` (with
            ``raise_on_fraction``), or no usable clip is left (when every clip is too short, the
            message says how long the longest is and which option to lower).
    """
    samples = list(samples)
    min_frames, largest = _frames_and_largest(min_frames, buckets)
    # keyed by the file: a kohya repeat is not scanned again (check_all), it shares its first copy's scan and bucket
    scans: dict[tuple[str, str], ClipScan] = {}

    def check(sample: VideoSample) -> str | None:
        if require_captions:
            problem = caption_problem(sample)
            if problem is not None:
                return problem
        scan = scan_clip(sample, min_frames, frames_flag=frames_flag, max_pixels=max_pixels, resolution=largest)
        scans[(sample.key, sample.path)] = scan  # a dict store is atomic under the GIL
        return scan.problem

    problems = check_all(
        samples,
        check,
        max_bad_samples_fraction=max_bad_samples_fraction,
        num_workers=min(4, os.cpu_count() or 1) if num_workers is None else num_workers,
        empty_hint="Point --train_data_dir at a folder of videos with captions.",
    )
    fix, none_long_enough = _screen_fix(samples, problems, scans, frames_flag)
    good = screen(
        samples,
        problems,
        max_bad_samples_fraction=max_bad_samples_fraction,
        log=log,
        quarantine=quarantine,
        raise_on_fraction=raise_on_fraction and not none_long_enough,
        what="training videos",
        failed="could not be used",
        skipped_as="clips that cannot be used",
        fix=fix,
    )
    if not buckets:
        return good
    # screen() returns renumbered copies in input order: pair them with the kept originals' scans.
    kept = [scans[(s.key, s.path)] for s, p in zip(samples, problems) if p is None]
    stills = list(image_buckets) if image_buckets is not None else one_frame_buckets(buckets)
    return _with_buckets(good, kept, buckets, stills)


def _frames_and_largest(min_frames: int | None, buckets: Sequence[Bucket] | None) -> tuple[int, tuple[int, int] | None]:
    """The fewest frames a clip needs (``min_frames``, else the fewest a bucket asks for) and the largest bucket's
    (height, width), None without buckets."""
    if min_frames is None:
        if not buckets:
            raise ValueError("validate_video_samples needs min_frames or buckets")
        min_frames = min(b[0] for b in buckets)
    largest = max(((b[1], b[2]) for b in buckets), key=lambda hw: hw[0] * hw[1]) if buckets else None
    return min_frames, largest


def _screen_fix(
    samples: list[VideoSample], problems: list[str | None], scans: dict[tuple[str, str], ClipScan], frames_flag: str
) -> tuple[str, bool]:
    """The fix a refusal of the clips names, and whether no clip is usable while some are merely too short (then
    the fix says which option to lower rather than which fraction to raise)."""
    fix = "Check the files in --train_data_dir and --max_num_frames."
    short = [
        scans[(s.key, s.path)].num_frames
        for s, p in zip(samples, problems)
        if p is not None and p.startswith("too short")
    ]
    # No usable clip and some merely too short: say which option to lower rather than which fraction to raise.
    none_long_enough = bool(short) and all(p is not None for p in problems)
    if none_long_enough:
        longest = max(short)
        fix = (
            f"No clip is long enough for {frames_flag}: the longest has {longest} decodable frame(s). Lower "
            f"--max_num_frames (or the frame counts of --frame_buckets) to at most {longest} (of the form 4k+1"
            f"{f', e.g. {frame_rule(longest)}' if frame_rule(longest) else ''}), or use longer clips."
        )
    return fix, none_long_enough


def _with_buckets(
    good: list[VideoSample], scans: list[ClipScan], buckets: Sequence[Bucket], stills: Sequence[Bucket]
) -> list[VideoSample]:
    """Each kept sample with its bucket: a clip's among ``buckets``, an image's among the one-frame ``stills``."""
    return [
        dataclasses.replace(
            sample,
            bucket=choose_bucket(scan.num_frames, scan.height, scan.width, stills if sample.is_image else buckets),
            source_size=(scan.height, scan.width),
            rotation=scan.rotation,
            source_frames=scan.num_frames,
            source_fps=scan.fps,
        )
        for sample, scan in zip(good, scans)
    ]
