"""The pooling stand-in family of the data-preparation tests (tests/data/test_prepare*.py, test_image_media.py):
latents are 8x average-pooled pixels, a caption's embedding is its length; squares only, or aspect-ratio buckets in
steps of 8, or a model that takes only squares. With the images they train on and the run's config."""

from __future__ import annotations

import types

import torch

from dit_lora.config import TrainConfig
from dit_lora.kit import components as base
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


def write_images(folder):
    """Four 16x16 images with captions of 1 to 4 characters in ``folder`` (a metadata.jsonl); returns ``folder``."""
    rows = []
    for i in range(4):
        make_image(folder / f"{i}.png", size=(16, 16), color=(60 * i, 0, 0))
        rows.append({"file_name": f"{i}.png", "text": "x" * (i + 1)})
    write_jsonl(folder / "metadata.jsonl", rows)
    return folder


def config(tmp_path, data, **kw):
    values = dict(train_data_dir=str(data), output_dir=str(tmp_path / "out"), cache_dir=str(tmp_path / "cache"),
                  resolution=16, train_batch_size=2, seed=0, random_flip=True, center_crop=True)
    values.update(kw)
    return TrainConfig(**values)


class PoolingBuckets:
    """A model that takes any size in steps of 8 (its pooling): aspect-ratio buckets."""

    def bucket_stride(self, model):
        return 8

    def square_only(self):
        return None


class SquareBuckets(PoolingBuckets):
    """A model whose transformer takes only squares (as DiT's)."""

    def square_only(self):
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


def write_mixed(folder):
    """The :data:`MIXED` images in ``folder``, each captioned with its name; returns ``folder``."""
    rows = []
    for i, (name, size) in enumerate(MIXED.items()):
        make_image(folder / name, size=size, color=(30 * i, 200, 0))
        rows.append({"file_name": name, "text": name})
    write_jsonl(folder / "metadata.jsonl", rows)
    return folder
