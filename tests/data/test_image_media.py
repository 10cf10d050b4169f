"""data/image_media.py: the image families' handler: each image in its nearest aspect-ratio bucket (cropped the
least), a fixed size, a model that takes only squares; the bucket table; check-data's rows; the cache identity."""

from __future__ import annotations

import pytest

from dit_lora.core.errors import UserError
from dit_lora.data.aspect import aspect_buckets, cropped_share, nearest_bucket
from dit_lora.data.image_media import ImageMedia
from dit_lora.data.prepare import prepare_data
from data_files import make_image
from pooling_data import (
    MIXED,
    accelerator,
    bucketed_pooling,
    config,
    pooling_images,
    square_pooling,
    write_images,
    write_mixed,
)


@pytest.fixture
def images(tmp_path):
    return write_images(tmp_path / "data")


@pytest.fixture
def mixed(tmp_path):
    return write_mixed(tmp_path / "mixed")


def test_image_media_identity_and_paths(tmp_path, images):
    cfg = config(tmp_path, images, center_crop=False)
    media = ImageMedia(cfg, pooling_images())
    identity = media.namespace_identity()
    # No resolution: each entry's name carries its bucket (RawSample.cache_key), so a new size re-encodes only those.
    assert identity == {"model": "pooling", "image_size": "bucket in the key", "center_crop": False,
                        "random_flip": True, "crop_seed": 0}
    assert media.noun == "image" and media.cacheable and media.groups([]) is None
    assert media.pixel_loader(media.list_samples())(0).shape == (3, 16, 16)


def test_each_image_trains_in_its_nearest_bucket_cropped_the_least(tmp_path, mixed, capsys):
    cfg = config(tmp_path, mixed, resolution=32)
    data = prepare_data(cfg, bucketed_pooling(), None, accelerator())
    buckets = aspect_buckets(32 * 32, 8)
    for sample, item in zip(data.samples, (data.dataset[(i, False)] for i in range(len(data)))):
        width, height = MIXED[sample.key]
        assert sample.bucket == nearest_bucket(height, width, buckets)
        assert cropped_share(height, width, sample.bucket) == min(cropped_share(height, width, b) for b in buckets)
        assert item["latents"].shape == (3, sample.bucket[0] // 8, sample.bucket[1] // 8)
    by_key = {s.key: s.bucket for s in data.samples}
    assert by_key["wide.png"] == (16, 64) and by_key["tall.png"] == (64, 16) and by_key["sq0.png"] == (32, 32)
    # a batch never mixes buckets: one group per bucket
    assert data.groups is not None and len(set(data.groups)) == len(set(by_key.values()))
    for group, sample in zip(data.groups, data.samples):
        assert [s.bucket for g, s in zip(data.groups, data.samples) if g == group] == \
               [sample.bucket] * data.groups.count(group)
    out = capsys.readouterr().out
    assert "images per bucket (--aspect_buckets auto: " in out
    table = out[out.index("bucket (WxH)"):].splitlines()
    assert ["32x32", "2", "28.6%"] in [line.split() for line in table]
    assert ["64x16", "1", "14.3%"] in [line.split() for line in table]


def test_a_fixed_size_crops_every_image_to_it(tmp_path, mixed, capsys):
    data = prepare_data(config(tmp_path, mixed, resolution=32, aspect_buckets="48x24"), bucketed_pooling(), None,
                        accelerator())
    assert {s.bucket for s in data.samples} == {(24, 48)} and data.groups is None
    assert data.dataset[(0, False)]["latents"].shape == (3, 3, 6)
    out = capsys.readouterr().out
    assert "--aspect_buckets 48x24: every image cropped to 48x24" in out
    tall = cropped_share(MIXED["tall.png"][1], MIXED["tall.png"][0], (24, 48))
    assert "lose more than 10% of their area" in out and f"tall.png ({tall:.0%})" in out
    with pytest.raises(UserError, match="--aspect_buckets 48x24, the nearest"):
        ImageMedia(config(tmp_path, mixed, resolution=32, aspect_buckets="50x21"), bucketed_pooling()).buckets


def test_a_model_that_takes_only_squares_keeps_them_and_says_so(tmp_path, mixed, capsys):
    data = prepare_data(config(tmp_path, mixed, resolution=32), square_pooling(), None, accelerator())
    assert {s.bucket for s in data.samples} == {(32, 32)} and data.groups is None
    out = capsys.readouterr().out
    assert out.count("aspect buckets: this stand-in takes only square inputs") == 1


def test_without_the_cache_each_image_is_decoded_to_its_bucket(tmp_path, mixed):
    data = prepare_data(config(tmp_path, mixed, resolution=32, cache_latents=False), bucketed_pooling(), None,
                        accelerator())
    for i, sample in enumerate(data.samples):
        assert data.dataset[(i, True)]["pixel_values"].shape == (3, *sample.bucket)


def test_the_image_bucket_table_counts_a_kohya_file_once(tmp_path, capsys):
    make_image(tmp_path / "data" / "5_sks" / "wide.png", size=(64, 16))
    make_image(tmp_path / "data" / "5_sks" / "sq.png", size=(32, 32))
    data = prepare_data(config(tmp_path, tmp_path / "data", resolution=32), bucketed_pooling(), None, accelerator())
    assert len(data) == 10  # 2 files x 5 repeats
    out = capsys.readouterr().out
    assert ", each file once whatever its repeats):" in out
    table = [line.split() for line in out[out.index("bucket (WxH)"):].splitlines()]
    assert ["32x32", "1", "50.0%"] in table and ["64x16", "1", "50.0%"] in table


def test_check_data_gives_each_repeated_sample_its_own_files_bucket(tmp_path):
    # the rows fold a file's copies into one: zipped with the samples, a copy took the next file's bucket, so
    # check-data looked for the wrong cache entries (1 found where training found every one)
    for name, size in (("sq.png", (32, 32)), ("wide.png", (64, 16)), ("tall.png", (16, 64))):
        make_image(tmp_path / "data" / "3_sks" / name, size=size)
    media = ImageMedia(config(tmp_path, tmp_path / "data", resolution=32), bucketed_pooling())
    samples = media.list_samples()
    rows, usable, _ = media.check(samples, log=lambda line: None)
    assert len(rows) == 3 and len(usable) == 9
    of_file = {r.key: r.bucket for r in rows}
    assert len(set(of_file.values())) == 3  # three shapes, three buckets
    assert all(s.bucket == of_file[s.key] for s in usable)
