"""Aspect-ratio buckets: the sizes near a target area that a model's stride allows, and which one a picture takes.

Peers bucket by aspect ratio by default (kohya's ``make_buckets``, SimpleTuner, musubi-tuner, OneTrainer): an
image keeps its shape up to a small crop instead of being cut to a square. The rule here is kohya's: for every
width that is a multiple of the model's stride, the largest height in the same stride whose area does not exceed
the target area, within an aspect limit; a picture goes to the bucket whose aspect ratio is nearest its own
(compared in log space, so 2:1 and 1:2 are equally far from 1:1), is resized to cover it and centre-cropped, which
is the least crop that bucket allows.

Sizes are ``(height, width)`` in pixels throughout, as :mod:`.frames` and the transforms write them.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from dit_lora.config.option import SIDE
from dit_lora.core.errors import UserError
from dit_lora.data.decode import oriented_size

Size = tuple[int, int]  # (height, width)

#: the widest aspect ratio a bucket may have (4:1 or 1:4), as kohya's and SimpleTuner's defaults
MAX_ASPECT = 4.0


def aspect_buckets(area: int, stride: int, *, max_aspect: float = MAX_ASPECT) -> list[Size]:
    """Every bucket of about ``area`` pixels in multiples of ``stride``, narrowest-tall first.

    For each width ``w`` (a multiple of ``stride``) the height is the largest multiple of ``stride`` with
    ``h * w <= area``, and its transpose (kohya's ``make_buckets`` adds both: without it the grid is lopsided when
    the area is a few strides wide, e.g. a 3:1 bucket but no 1:3 one at 64 px in a stride of 32); buckets whose
    aspect ratio exceeds ``max_aspect`` either way are left out, and so are duplicates. The square ``sqrt(area)``
    (rounded down to the stride) is always one of them.

    Raises:
        ValueError: ``stride`` or ``area`` is not positive, or ``area`` is smaller than one ``stride`` square.
    """
    if stride < 1 or area < stride * stride:
        raise ValueError(f"no bucket of area {area} in a stride of {stride}")
    side = max(stride, math.isqrt(area) // stride * stride)
    buckets: set[Size] = {(side, side)}
    width = stride
    while width * stride <= area:
        height = area // width // stride * stride
        if height >= stride and max(height / width, width / height) <= max_aspect:
            buckets.update({(height, width), (width, height)})
        width += stride
    return sorted(buckets, key=lambda hw: (-hw[0] / hw[1], -hw[0] * hw[1]))


def nearest_bucket(height: int, width: int, buckets: Sequence[Size]) -> Size:
    """The bucket whose aspect ratio is nearest ``height / width`` (log space); then the larger area, then the earlier.

    Raises:
        ValueError: no buckets, or a size that is not positive.
    """
    if not buckets or height <= 0 or width <= 0:
        raise ValueError(f"no bucket for a {width}x{height} picture among {len(buckets)} bucket(s)")
    aspect = math.log(height / width)
    order = {b: i for i, b in reversed(list(enumerate(buckets)))}
    return min(order, key=lambda b: (abs(math.log(b[0] / b[1]) - aspect), -b[0] * b[1], order[b]))


def cropped_share(height: int, width: int, bucket: Size) -> float:
    """The share of a ``width`` x ``height`` picture's area that a cover-resize to ``bucket`` and its crop cut off.

    0.0 when the aspect ratios match; a 200 x 50 image in a square bucket loses 0.75. Rounded to 9 decimals, so
    that an exact share stays exact: a 96 x 64 image in an 80 x 48 bucket loses 0.1, not 0.10000000000000009 (which
    was counted among those losing "more than 10%").
    """
    bucket_h, bucket_w = bucket
    scale = max(bucket_h / height, bucket_w / width)
    return round(max(0.0, 1.0 - (bucket_h * bucket_w) / (height * scale * width * scale)), 9)


def format_size(size: Size) -> str:
    """``WxH``, the way users and peers write an image size (kohya, SimpleTuner): width first."""
    return f"{size[1]}x{size[0]}"


# ---- the run's buckets (``--aspect_buckets``) and each image's ----------------------------------------------------

#: an image whose crop cuts more than this share of its area is counted in the run's log and warned about by check-data
CROP_WARNING = 0.10
#: an image or clip resized up by more than this factor to cover its bucket is warned about by check-data (a few
#: pixels short of a bucket side is a resize like any other, not worth a warning)
UPSCALE_WARNING = 1.10
AUTO, SQUARE = "auto", "square"
FLAG = "--aspect_buckets"


def parse_mode(value: str) -> str | Size:
    """``auto``, ``square`` or a fixed size: ``--aspect_buckets`` read, a fixed ``WIDTHxHEIGHT`` as ``(height, width)``.

    Raises:
        UserError: anything else, in one paragraph with the three forms.
    """
    text = str(value).strip().lower()
    if text in (AUTO, SQUARE):
        return text
    parts = text.replace("*", "x").split("x")
    if len(parts) == 2 and all(p.strip().isdigit() and int(p) > 0 for p in parts):
        if any(int(p) not in SIDE for p in parts):
            raise UserError(f"{FLAG} {value!r}: each side must be {SIDE}: {SIDE.why}.")
        return int(parts[1]), int(parts[0])
    raise UserError(
        f"{FLAG} {value!r} is not a bucket mode: give `auto` (each image in the aspect-ratio bucket nearest its shape, "
        f"the default), `square` (every image cropped to the --resolution square) or one fixed size as "
        f"WIDTHxHEIGHT, e.g. 768x512."
    )


def run_buckets(value: str, resolution: int, stride: int | None) -> list[Size]:
    """The buckets a run's images go to: ``auto``, about ``resolution**2`` pixels in ``stride`` (:func:`aspect_buckets`,
    the square among them); ``square``, the ``resolution`` square; a fixed ``WxH``, that one size. ``stride`` None:
    the model takes only squares, so ``auto`` is the square too.

    Raises:
        UserError: a bad mode, a fixed size that is not a multiple of ``stride`` (naming the nearest that is), or a
            fixed size for a model that takes only squares.
    """
    mode = parse_mode(value)
    if isinstance(mode, str):  # AUTO or SQUARE
        if mode == AUTO and stride is not None:
            return aspect_buckets(resolution * resolution, stride)
        return [(resolution, resolution)]
    height, width = mode
    if stride is None:
        raise UserError(
            f"{FLAG} {format_size(mode)}: this model takes only square images, so there is no fixed size to choose; "
            f"use {FLAG} square (or auto), and --resolution for the size."
        )
    if height % stride or width % stride:
        near_height, near_width = (max(stride, round(side / stride) * stride) for side in (height, width))
        raise UserError(
            f"{FLAG} {format_size(mode)} is not a multiple of {stride} on each side (this model's stride: the VAE's "
            f"downsampling x the transformer's patch size), so its latents would not patch evenly. Use "
            f"{FLAG} {format_size((near_height, near_width))}, the nearest size that is."
        )
    return [(height, width)]


def bucket_of(width: int, height: int, buckets: Sequence[Size]) -> tuple[Size, float]:
    """The bucket a ``width`` x ``height`` image (as oriented) trains in and the share of it the crop cuts off:
    the one choice training and ``check-data`` make (:func:`nearest_bucket`, :func:`cropped_share`)."""
    bucket = nearest_bucket(height, width, buckets)
    return bucket, cropped_share(height, width, bucket)


def bucket_table(chosen: Sequence[Size], *, noun: str = "image") -> list[str]:
    """The lines of the bucket table: each bucket used (``WxH``, largest area first, then widest), its count, share."""
    counts: dict[Size, int] = {}
    for bucket in chosen:
        counts[bucket] = counts.get(bucket, 0) + 1
    total = max(1, len(chosen))
    rows = sorted(counts.items(), key=lambda kv: (-kv[0][0] * kv[0][1], kv[0][0] / kv[0][1]))
    width = max([len("bucket (WxH)")] + [len(format_size(b)) for b in counts])
    lines = [f"  {'bucket (WxH)':<{width}}  {noun + 's':>7}  share"]
    lines += [f"  {format_size(b):<{width}}  {n:>7}  {n / total:>5.1%}" for b, n in rows]
    return lines


def upscale_factor(width: int, height: int, target_w: int, target_h: int) -> float:
    """The factor a ``width`` x ``height`` image is resized by to cover ``target_w`` x ``target_h`` (above 1: up)."""
    return max(target_w / width, target_h / height)


def share_text(share: float, threshold: float = CROP_WARNING) -> str:
    """``share`` as a percentage, with a decimal where whole percents would round it onto ``threshold`` (a crop of
    10.3% reported as "10%" beside "more than 10%" reads as a contradiction)."""
    text = f"{share:.0%}"
    return f"{share:.1%}" if text == f"{threshold:.0%}" else text


def crop_line(
    cropped: Sequence[tuple[str, float]], *, noun: str = "image", threshold: float = CROP_WARNING
) -> str | None:
    """One line on the images whose crop cuts more than ``threshold`` of their area (``(key, share)`` pairs), the
    most cut first; None when there is none."""
    over = sorted(((k, s) for k, s in cropped if s > threshold), key=lambda ks: -ks[1])
    if not over:
        return None
    named = ", ".join(f"{k} ({share_text(s)})" for k, s in over[:5]) + (
        f" and {len(over) - 5} more" if len(over) > 5 else ""
    )
    return f"{len(over)} {noun}(s) lose more than {threshold:.0%} of their area to the crop into their bucket: {named}"


def sample_bucket(sample, buckets: Sequence[Size], *, max_pixels: int | None = None) -> tuple[Size, float]:
    """:func:`bucket_of` an image sample (a :class:`~dit_lora.data.sources.RawSample`), its size read from its header
    after its EXIF orientation, without decoding (:func:`~dit_lora.data.decode.oriented_size`)."""
    width, height = oriented_size(sample.source(), max_pixels)
    return bucket_of(width, height, buckets)
