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
from typing import Sequence

Size = tuple[int, int]  # (height, width)

#: the widest aspect ratio a bucket may have (4:1 or 1:4), as kohya's and SimpleTuner's defaults
MAX_ASPECT = 4.0


def aspect_buckets(area: int, stride: int, *, max_aspect: float = MAX_ASPECT) -> list[Size]:
    """Every bucket of about ``area`` pixels in multiples of ``stride``, narrowest-tall first.

    For each width ``w`` (a multiple of ``stride``) the height is the largest multiple of ``stride`` with
    ``h * w <= area``; buckets whose aspect ratio exceeds ``max_aspect`` either way are left out, and so are
    duplicates. The square ``sqrt(area)`` (rounded down to the stride) is always one of them.

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
            buckets.add((height, width))
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

    0.0 when the aspect ratios match; a 200 x 50 image in a square bucket loses 0.75.
    """
    bucket_h, bucket_w = bucket
    scale = max(bucket_h / height, bucket_w / width)
    return max(0.0, 1.0 - (bucket_h * bucket_w) / (height * scale * width * scale))


def format_size(size: Size) -> str:
    """``WxH``, the way users and peers write an image size (kohya, SimpleTuner): width first."""
    return f"{size[1]}x{size[0]}"
