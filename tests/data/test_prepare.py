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
from dit_lora.errors import UserError
from dit_lora.families.diffusion import DiffusionFamily
from dit_lora.output.names import QUARANTINE_FILE
from data_files import make_image, write_jsonl


class PoolingImages(DiffusionFamily):
    """Latents are 8x average-pooled pixels; a caption's embedding is its length."""

    name = "pooling_images"

    def __init__(self) -> None:
        self.encoded: list[int] = []  # images per encode call (a spec is immutable: a list it appends to)

    def cache_identity(self, cfg, comps=None):
        return {"model": "pooling"}

    def encode_images(self, comps, pixel_values):
        self.encoded.append(pixel_values.shape[0])
        return torch.nn.functional.avg_pool2d(pixel_values, 8)

    def encode_prompts(self, comps, captions, *, with_negative=False):
        return {"prompt_embeds": torch.tensor([[float(len(c))] for c in captions])}

    def _unused(self, *args, **kwargs):
        raise NotImplementedError

    validate_config = load_components = compute_loss = save_adapter = load_pipeline_with_adapter = _unused


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
    family, cfg = PoolingImages(), config(tmp_path, images)
    data = prepare_data(cfg, family, None, accelerator())
    assert data.cached and isinstance(data.dataset, batch_lib.CachedLatentDataset) and len(data) == 4
    assert sum(family.encoded) == 8  # each image and its flip
    item = data.dataset[(2, True)]
    assert item["latents"].shape == (3, 2, 2) and item["prompt_embeds"].tolist() == [3.0]
    assert json.loads((tmp_path / "out" / QUARANTINE_FILE).read_text()) == []
    again = PoolingImages()
    prepare_data(cfg, again, None, accelerator())
    assert again.encoded == [] and "4/4 samples already cached" in capsys.readouterr().out


def test_a_bad_cache_entry_is_recomputed(tmp_path, images, capsys):
    cfg = config(tmp_path, images)
    data = prepare_data(cfg, PoolingImages(), None, accelerator())
    data.dataset.files[0].write_bytes(b"not safetensors")
    family = PoolingImages()
    prepare_data(cfg, family, None, accelerator())
    assert sum(family.encoded) == 2 and "1 bad cache entry to recompute" in capsys.readouterr().out


def test_without_the_cache_images_are_decoded_each_step(tmp_path, images):
    family = PoolingImages()
    data = prepare_data(config(tmp_path, images, cache_latents=False), family, None, accelerator())
    assert not data.cached and isinstance(data.dataset, batch_lib.RawImageDataset) and family.encoded == []
    assert data.collate is batch_lib.collate and data.groups is None


def test_bad_images_are_quarantined_and_too_many_stop_the_run(tmp_path, images):
    (images / "2.png").write_bytes(b"broken")
    cfg = config(tmp_path, images, max_bad_samples_fraction=0.3)
    data = prepare_data(cfg, PoolingImages(), None, accelerator())
    assert [s.key for s in data.samples] == ["0.png", "1.png", "3.png"]
    (entry,) = json.loads((tmp_path / "out" / QUARANTINE_FILE).read_text())
    assert entry["key"] == "2.png" and entry == data.quarantine[0]
    (images / "1.png").write_bytes(b"")
    with pytest.raises(UserError, match="--max_bad_samples_fraction") as err:
        prepare_data(cfg, PoolingImages(), None, accelerator())
    assert QUARANTINE_FILE in str(err.value)
    assert len(json.loads((tmp_path / "out" / QUARANTINE_FILE).read_text())) == 2  # written before stopping


def test_image_media_identity_and_paths(tmp_path, images):
    cfg = config(tmp_path, images, center_crop=False)
    media = ImageMedia(cfg, PoolingImages())
    identity = media.namespace_identity()
    assert identity == {"model": "pooling", "resolution": 16, "center_crop": False, "random_flip": True,
                        "crop_seed": 0}
    assert media.noun == "image" and media.cacheable and media.groups([]) is None
    assert media.pixel_loader(media.list_samples())(0).shape == (3, 16, 16)
    assert cache_root_for(cfg) == tmp_path / "cache"
    assert report_lines(media, [], None) == []
