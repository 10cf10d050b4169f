"""data/prepare_cache.py: the latent cache of prepare_data, built once and reused; a bad entry recomputed; the
key carrying each image's bucket, so a new bucket mode re-encodes only the images whose bucket changed."""

from __future__ import annotations

import json

import pytest

from dit_lora.data import batches as batch_lib
from dit_lora.data.prepare import prepare_data
from dit_lora.data.prepare_cache import cache_root_for
from dit_lora.output.names import QUARANTINE_FILE
from pooling_data import MIXED, accelerator, bucketed_pooling, config, pooling_images, write_images, write_mixed


@pytest.fixture
def images(tmp_path):
    return write_images(tmp_path / "data")


@pytest.fixture
def mixed(tmp_path):
    return write_mixed(tmp_path / "mixed")


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


def test_the_cache_root_is_the_flag_else_the_default(tmp_path, images):
    from dit_lora.data.cache import default_cache_root

    assert cache_root_for(config(tmp_path, images).data) == tmp_path / "cache"
    assert cache_root_for(config(tmp_path, images, cache_dir=None).data) == default_cache_root()
