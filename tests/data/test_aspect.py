"""Aspect-ratio buckets (dit_lora/data/aspect.py): the grid, the nearest bucket, the crop share."""

from __future__ import annotations

import math

import pytest

from dit_lora.data.aspect import aspect_buckets, cropped_share, format_size, nearest_bucket


@pytest.mark.parametrize("area,stride", [(64 * 64, 32), (256 * 256, 16), (1024 * 1024, 32), (480 * 832, 16)])
def test_buckets_are_in_the_stride_within_the_area_and_the_aspect_limit(area, stride):
    buckets = aspect_buckets(area, stride)
    assert len(buckets) == len(set(buckets))
    for height, width in buckets:
        assert height % stride == 0 and width % stride == 0
        assert height * width <= area
        assert max(height / width, width / height) <= 4.0
    side = math.isqrt(area) // stride * stride
    assert (side, side) in buckets


def test_each_width_takes_the_largest_height_that_fits():
    buckets = aspect_buckets(1024 * 1024, 32)
    for height, width in buckets:
        assert (height + 32) * width > 1024 * 1024 or height == width


@pytest.mark.parametrize("size,expected", [((50, 200), (512, 2048)), ((200, 50), (2048, 512)), ((768, 1024), None)])
def test_nearest_bucket_by_aspect(size, expected):
    buckets = aspect_buckets(1024 * 1024, 32)
    height, width = size
    chosen = nearest_bucket(height, width, buckets)
    best = min(abs(math.log(b[0] / b[1]) - math.log(height / width)) for b in buckets)
    assert abs(math.log(chosen[0] / chosen[1]) - math.log(height / width)) == best
    if expected:
        assert chosen == expected


def test_nearest_bucket_prefers_the_larger_area_then_the_earlier():
    assert nearest_bucket(100, 100, [(32, 32), (64, 64)]) == (64, 64)
    assert nearest_bucket(100, 100, [(64, 64), (64, 64)]) == (64, 64)
    with pytest.raises(ValueError):
        nearest_bucket(0, 10, [(64, 64)])
    with pytest.raises(ValueError):
        nearest_bucket(10, 10, [])


def test_cropped_share():
    assert cropped_share(50, 200, (1024, 1024)) == pytest.approx(0.75)
    assert cropped_share(200, 50, (64, 64)) == pytest.approx(0.75)
    assert cropped_share(512, 2048, (512, 2048)) == 0.0
    assert cropped_share(300, 400, (64, 64)) == pytest.approx(0.25)


def test_no_bucket_smaller_than_one_stride():
    with pytest.raises(ValueError):
        aspect_buckets(100, 32)
    assert format_size((32, 128)) == "128x32"
