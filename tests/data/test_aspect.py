"""Aspect-ratio buckets (dit_lora/data/aspect.py): the grid, the nearest bucket, the crop share."""

from __future__ import annotations

import math

import pytest

from PIL import Image

from dit_lora.data.aspect import (
    CROP_WARNING, UPSCALE_WARNING, aspect_buckets, bucket_of, bucket_table, crop_line, cropped_share, format_size,
    nearest_bucket, parse_mode, run_buckets, sample_bucket, share_text, upscale_factor,
)
from dit_lora.data.sources import RawSample
from dit_lora.core.errors import UserError


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


@pytest.mark.parametrize("area,stride", [(64 * 64, 32), (96 * 96, 32), (256 * 256, 16), (1024 * 1024, 32)])
def test_the_grid_is_symmetric(area, stride):
    # every wide bucket has its tall twin: at 64 px in a stride of 32 the grid had 96x32 but not 32x96
    buckets = aspect_buckets(area, stride)
    assert {(w, h) for h, w in buckets} == set(buckets)


def test_each_width_takes_the_largest_height_that_fits():
    buckets = aspect_buckets(1024 * 1024, 32)
    for height, width in buckets:
        # the largest height for its width, or the transpose of such a bucket
        assert (height + 32) * width > 1024 * 1024 or (width + 32) * height > 1024 * 1024


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


def test_a_crop_of_exactly_ten_percent_is_not_more_than_ten_percent():
    # 96 x 64 into 80 x 48 cuts 10.0%: the float 0.10000000000000009 was counted as "more than 10%"
    share = cropped_share(64, 96, (48, 80))
    assert share == 0.1 and crop_line([("img1.png", share)]) is None


def test_no_bucket_smaller_than_one_stride():
    with pytest.raises(ValueError):
        aspect_buckets(100, 32)
    assert format_size((32, 128)) == "128x32"


def test_the_mode_is_auto_square_or_a_fixed_width_by_height():
    assert parse_mode("auto") == "auto" and parse_mode(" Square ") == "square"
    assert parse_mode("768x512") == (512, 768)  # WIDTHxHEIGHT in, (height, width) out
    for bad in ("", "wide", "768", "0x512", "768x512x3", "-32x32"):
        with pytest.raises(UserError, match="--aspect_buckets"):
            parse_mode(bad)


def test_the_run_buckets_of_each_mode():
    assert run_buckets("auto", 64, 32) == aspect_buckets(64 * 64, 32)
    assert run_buckets("square", 64, 32) == [(64, 64)]
    assert run_buckets("auto", 64, None) == [(64, 64)]  # a model that takes only squares
    assert run_buckets("96x64", 64, 32) == [(64, 96)]
    assert max(h * w for h, w in run_buckets("auto", 1024, 32)) == 1024 * 1024  # the square bounds them


def test_a_fixed_size_off_the_stride_names_the_nearest_valid_one():
    with pytest.raises(UserError, match=r"multiple of 32.*--aspect_buckets 96x64") as err:
        run_buckets("100x70", 64, 32)
    assert "\n" not in str(err.value)
    with pytest.raises(UserError, match="only square"):
        run_buckets("96x64", 64, None)


@pytest.mark.parametrize("width,height", [(200, 50), (50, 200), (300, 100), (64, 64), (120, 80), (80, 120)])
def test_an_image_takes_the_bucket_that_cuts_the_least(width, height):
    buckets = aspect_buckets(64 * 64, 32)
    bucket, share = bucket_of(width, height, buckets)
    assert bucket in buckets and share == pytest.approx(cropped_share(height, width, bucket))
    assert share <= min(cropped_share(height, width, b) for b in buckets) + 1e-12


def test_the_bucket_table_counts_and_shares():
    lines = bucket_table([(64, 64), (32, 128), (64, 64), (128, 32)])
    assert lines[0].split() == ["bucket", "(WxH)", "images", "share"]
    rows = [line.split() for line in lines[1:]]
    assert ["64x64", "2", "50.0%"] in rows and ["128x32", "1", "25.0%"] in rows and ["32x128", "1", "25.0%"] in rows


def test_the_crop_line_names_the_images_cut_beyond_the_threshold():
    assert crop_line([("a.png", 0.05), ("b.png", 0.1)]) is None
    line = crop_line([("a.png", 0.05), ("b.png", 0.5), ("c.png", 0.25)])
    assert line.startswith("2 image(s) lose more than 10%") and line.index("b.png (50%)") < line.index("c.png (25%)")


def test_a_sample_is_bucketed_by_its_size_after_exif_orientation(tmp_path):
    path = tmp_path / "rotated.jpg"
    exif = Image.Exif()
    exif[0x0112] = 6  # stored 200 x 50, shown 50 x 200
    Image.new("RGB", (200, 50), (10, 20, 30)).save(path, exif=exif.tobytes())
    sample = RawSample(key="rotated.jpg", caption="x", path=str(path))
    assert sample_bucket(sample, aspect_buckets(64 * 64, 32)) == ((128, 32), pytest.approx(0.0))


def test_a_share_that_rounds_onto_the_threshold_keeps_a_decimal():
    """"lose more than 10%" beside "(10%)" read as a contradiction: a 10.3% crop is written 10.3%."""
    assert share_text(0.103) == "10.3%" and share_text(0.097) == "9.7%"
    assert share_text(0.25) == "25%" and share_text(0.111) == "11%"
    line = crop_line([("a.png", 0.103), ("b.png", 0.05)])
    assert line is not None and "a.png (10.3%)" in line and "b.png" not in line and f"{CROP_WARNING:.0%}" in line


def test_the_upscale_factor_is_the_cover_resize():
    assert upscale_factor(339, 191, 336, 192) == pytest.approx(192 / 191)  # a pixel short: below the warning
    assert upscale_factor(339, 191, 336, 192) < UPSCALE_WARNING
    assert upscale_factor(16, 16, 32, 32) == 2.0 and upscale_factor(64, 32, 32, 32) == 1.0
    assert upscale_factor(100, 50, 64, 64) == pytest.approx(1.28)
