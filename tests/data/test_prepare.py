"""data/prepare.py: from a config to what the loop trains on, for images (a pooling stand-in family, CPU).

Clips go through the same flow in tests/data/test_video_prepare.py; the screening of bad files in
tests/data/test_validation.py and tests/data/test_preflight.py.
"""

from __future__ import annotations

import json
import types

import pytest
import torch

from dit_lora.config import TrainConfig
from dit_lora.data import batches as batch_lib
from dit_lora.data.prepare import ImageMedia, cache_root_for, prepare_data, report_lines
from dit_lora.core.errors import UserError
from dit_lora.data.aspect import aspect_buckets, cropped_share, nearest_bucket
from dit_lora.kit import components as base
from dit_lora.output.names import QUARANTINE_FILE
from data_files import make_image, write_jsonl
from diffusion_stand_ins import stand_in_spec


class PoolingEncoders(base.DiffusionEncoders):
    """Latents are 8x average-pooled pixels; a caption's embedding is its length."""

    def __init__(self) -> None:
        self.encoded: list[int] = []  # images per encode call (a spec is immutable: a list it appends to)

    def cache_identity(self, cfg, comps=None):
        return {"model": "pooling"}

    def encode_images(self, comps, pixel_values):
        self.encoded.append(pixel_values.shape[0])
        return torch.nn.functional.avg_pool2d(pixel_values, 8)

    def encode_prompts(self, comps, captions, *, with_negative=False):
        return {"prompt_embeds": torch.tensor([[float(len(c))] for c in captions])}


def pooling_images():
    """The stand-in family: PoolingEncoders, squares only."""
    return stand_in_spec("pooling_images", PoolingEncoders())


def accelerator():
    return types.SimpleNamespace(is_main_process=True, process_index=0, num_processes=1,
                                 wait_for_everyone=lambda: None)


@pytest.fixture
def images(tmp_path):
    rows = []
    for i in range(4):
        make_image(tmp_path / "data" / f"{i}.png", size=(16, 16), color=(60 * i, 0, 0))
        rows.append({"file_name": f"{i}.png", "text": "x" * (i + 1)})
    write_jsonl(tmp_path / "data" / "metadata.jsonl", rows)
    return tmp_path / "data"


def config(tmp_path, data, **kw):
    values = dict(train_data_dir=str(data), output_dir=str(tmp_path / "out"), cache_dir=str(tmp_path / "cache"),
                  resolution=16, train_batch_size=2, seed=0, random_flip=True, center_crop=True)
    values.update(kw)
    return TrainConfig(**values)


def test_the_cache_is_built_once_and_reused(tmp_path, images, capsys):
    family, cfg = pooling_images(), config(tmp_path, images)
    data = prepare_data(cfg, family, None, accelerator())
    assert data.cached and isinstance(data.dataset, batch_lib.CachedLatentDataset) and len(data) == 4
    assert sum(family.encoders.encoded) == 8  # each image and its flip
    item = data.dataset[(2, True)]
    assert item["latents"].shape == (3, 2, 2) and item["prompt_embeds"].tolist() == [3.0]
    assert json.loads((tmp_path / "out" / QUARANTINE_FILE).read_text()) == []
    again = pooling_images()
    prepare_data(cfg, again, None, accelerator())
    assert again.encoders.encoded == [] and "4/4 samples already cached" in capsys.readouterr().out


def test_a_bad_cache_entry_is_recomputed(tmp_path, images, capsys):
    cfg = config(tmp_path, images)
    data = prepare_data(cfg, pooling_images(), None, accelerator())
    data.dataset.files[0].write_bytes(b"not safetensors")
    family = pooling_images()
    prepare_data(cfg, family, None, accelerator())
    assert sum(family.encoders.encoded) == 2 and "1 bad cache entry to recompute" in capsys.readouterr().out


def test_without_the_cache_images_are_decoded_each_step(tmp_path, images):
    family = pooling_images()
    data = prepare_data(config(tmp_path, images, cache_latents=False), family, None, accelerator())
    assert not data.cached and isinstance(data.dataset, batch_lib.RawImageDataset) and family.encoders.encoded == []
    assert data.collate is batch_lib.collate and data.groups is None


def test_bad_images_are_quarantined_and_too_many_stop_the_run(tmp_path, images):
    (images / "2.png").write_bytes(b"broken")
    cfg = config(tmp_path, images, max_bad_samples_fraction=0.3)
    data = prepare_data(cfg, pooling_images(), None, accelerator())
    assert [s.key for s in data.samples] == ["0.png", "1.png", "3.png"]
    (entry,) = json.loads((tmp_path / "out" / QUARANTINE_FILE).read_text())
    assert entry["key"] == "2.png" and entry == data.quarantine[0]
    (images / "1.png").write_bytes(b"")
    with pytest.raises(UserError, match="--max_bad_samples_fraction") as err:
        prepare_data(cfg, pooling_images(), None, accelerator())
    assert QUARANTINE_FILE in str(err.value)
    assert len(json.loads((tmp_path / "out" / QUARANTINE_FILE).read_text())) == 2  # written before stopping


def test_image_media_identity_and_paths(tmp_path, images):
    cfg = config(tmp_path, images, center_crop=False)
    media = ImageMedia(cfg, pooling_images())
    identity = media.namespace_identity()
    # No resolution: each entry's name carries its bucket (RawSample.cache_key), so a new size re-encodes only those.
    assert identity == {"model": "pooling", "image_size": "bucket in the key", "center_crop": False,
                        "random_flip": True, "crop_seed": 0}
    assert media.noun == "image" and media.cacheable and media.groups([]) is None
    assert media.pixel_loader(media.list_samples())(0).shape == (3, 16, 16)
    assert cache_root_for(cfg.data) == tmp_path / "cache"
    assert report_lines(media, [], None) == []


class PoolingBuckets:
    """A model that takes any size in steps of 8 (its pooling): aspect-ratio buckets."""

    def bucket_stride(self, cfg):
        return 8

    def square_only(self, cfg):
        return None


class SquareBuckets(PoolingBuckets):
    """A model whose transformer takes only squares (as DiT's)."""

    def square_only(self, cfg):
        return "this stand-in takes only square inputs, so every image is cropped to the --resolution square"


def bucketed_pooling():
    """pooling_images whose model takes any size in steps of 8 (its pooling): aspect-ratio buckets."""
    return stand_in_spec("bucketed_pooling", PoolingEncoders(), image_buckets=PoolingBuckets())


def square_pooling():
    """A model whose transformer takes only squares (as DiT's)."""
    return stand_in_spec("square_pooling", PoolingEncoders(), image_buckets=SquareBuckets())


#: (width, height) of a mixed set: 4:1, 1:4, 3:1, 3:2, 2:3 and squares
MIXED = {"wide.png": (128, 32), "tall.png": (32, 128), "three.png": (96, 32), "land.png": (48, 32),
         "port.png": (32, 48), "sq0.png": (32, 32), "sq1.png": (40, 40)}


@pytest.fixture
def mixed(tmp_path):
    rows = []
    for i, (name, size) in enumerate(MIXED.items()):
        make_image(tmp_path / "mixed" / name, size=size, color=(30 * i, 200, 0))
        rows.append({"file_name": name, "text": name})
    write_jsonl(tmp_path / "mixed" / "metadata.jsonl", rows)
    return tmp_path / "mixed"


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


def test_the_cache_key_carries_the_bucket_so_a_new_mode_re_encodes_only_what_changed(tmp_path, mixed, capsys):
    family = bucketed_pooling()
    data = prepare_data(config(tmp_path, mixed, resolution=32), family, None, accelerator())
    for sample in data.samples:
        height, width = sample.bucket
        assert sample.cache_key() == f"{sample.content_id()}:{height}x{width}"
    assert sum(family.encoders.encoded) == 2 * len(MIXED)
    again = bucketed_pooling()
    square = prepare_data(config(tmp_path, mixed, resolution=32, aspect_buckets="square"), again, None, accelerator())
    assert {s.bucket for s in square.samples} == {(32, 32)} and square.groups is None
    assert sum(again.encoders.encoded) == 2 * (len(MIXED) - 2)  # the two square images are cached already
    assert f"2/{len(MIXED)} samples already cached" in capsys.readouterr().out


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


def test_every_caption_file_that_is_not_utf8_stops_the_run_in_one_paragraph(tmp_path):
    """Training's side of the issue's finding (reported one file per run): all three encodings named at once."""
    from data_files import bad_caption_folder

    data = bad_caption_folder(tmp_path / "data")
    with pytest.raises(UserError) as err:
        prepare_data(config(tmp_path, data), pooling_images(), None, accelerator())
    text = str(err.value)
    assert text.startswith(f"3 caption file(s) in --train_data_dir `{data}` are not UTF-8 text")
    assert all(name in text for name in ("latin1.txt", "shift_jis.txt", "utf16_no_bom.txt")) and "\n" not in text
