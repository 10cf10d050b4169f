"""data/transforms.py: resize, crop, flip and scaling of a training image, and the pure per-sample draws."""

from __future__ import annotations

import random

import numpy as np
import pytest
import torch
from PIL import Image

from dit_lora.data import crop_box, crop_seed, flip_decision, preprocess_image, resized_size
from dit_lora.core.errors import UserError


def test_preprocess_shape_dtype_range():
    rng = np.random.default_rng(1)
    img = Image.fromarray(rng.integers(0, 256, (30, 50, 3), dtype=np.uint8))
    out = preprocess_image(img, 16, center_crop=True, flip=False, crop_rng_seed=0)
    assert out.shape == (3, 16, 16) and out.dtype == torch.float32 and out.is_contiguous()
    assert out.min() >= -1.0 and out.max() <= 1.0
    black = preprocess_image(Image.new("RGB", (8, 8)), 8, center_crop=True, flip=False, crop_rng_seed=0)
    white = preprocess_image(Image.new("L", (8, 8), 255), 8, center_crop=True, flip=False, crop_rng_seed=0)
    assert torch.all(black == -1.0) and torch.all(white == 1.0)
    tall = preprocess_image(img, (24, 12), center_crop=False, flip=False, crop_rng_seed=3)
    assert tall.shape == (3, 24, 12)
    with pytest.raises(UserError, match="--resolution"):
        preprocess_image(img, 0, center_crop=True, flip=False, crop_rng_seed=0)


def test_resize_matches_torchvision_rule():
    # torchvision Resize(256) on PIL: short side -> 256, long side int(256 * long / short)
    assert resized_size(640, 480, 256) == (341, 256)
    assert resized_size(480, 640, 256) == (256, 341)
    assert resized_size(100, 100, 64) == (64, 64)
    # non-square targets: scale so both sides cover
    assert resized_size(100, 100, (64, 32)) == (64, 64)
    assert resized_size(400, 100, (50, 100)) == (200, 50)
    # the pixels are PIL's plain bilinear resize, the call torchvision makes
    rng = np.random.default_rng(2)
    img = Image.fromarray(rng.integers(0, 256, (40, 60, 3), dtype=np.uint8))
    ref = np.asarray(img.resize((30, 20), Image.BILINEAR).crop((5, 0, 25, 20)), dtype=np.float32)
    out = preprocess_image(img, 20, center_crop=True, flip=False, crop_rng_seed=0)
    assert torch.allclose(out, torch.from_numpy(ref).permute(2, 0, 1) / 127.5 - 1)


def test_center_crop_takes_the_center():
    # 30x10 image: white 10x10 square in the middle, black sides. Center crop to 10 = pure white.
    img = Image.new("RGB", (30, 10), (0, 0, 0))
    img.paste((255, 255, 255), (10, 0, 20, 10))
    out = preprocess_image(img, 10, center_crop=True, flip=False, crop_rng_seed=0)
    assert torch.all(out == 1.0)
    assert crop_box((30, 10), 10, center_crop=True, crop_rng_seed=0) == (10, 0, 20, 10)


def test_flip_mirrors():
    arr = np.zeros((8, 8, 3), dtype=np.uint8)
    arr[:, :2] = 255  # white stripe on the left
    img = Image.fromarray(arr)
    plain = preprocess_image(img, 8, center_crop=True, flip=False, crop_rng_seed=0)
    flipped = preprocess_image(img, 8, center_crop=True, flip=True, crop_rng_seed=0)
    assert torch.equal(flipped, plain.flip(-1))
    assert torch.all(flipped[:, :, -2:] == 1.0) and torch.all(flipped[:, :, :-2] == -1.0)


def test_random_crop_deterministic_per_seed():
    # 64 wide x 16 tall: the resize to 16 keeps it 64x16, so the crop can slide 0..48 horizontally.
    rng = np.random.default_rng(3)
    img = Image.fromarray(rng.integers(0, 256, (16, 64, 3), dtype=np.uint8))

    def crop(seed):
        return preprocess_image(img, 16, center_crop=False, flip=False, crop_rng_seed=seed)

    assert torch.equal(crop(7), crop(7))
    boxes = {crop_box((64, 16), 16, center_crop=False, crop_rng_seed=s) for s in range(20)}
    assert len(boxes) > 10  # different seeds give different crops
    assert all(0 <= left <= 48 and top == 0 for left, top, _, _ in boxes)
    left = crop_box((64, 16), 16, center_crop=False, crop_rng_seed=7)[0]
    expected = np.asarray(img, dtype=np.float32)[:, left : left + 16]
    assert torch.equal(crop(7), torch.from_numpy(expected).permute(2, 0, 1) / 127.5 - 1)
    assert sum(not torch.equal(crop(7), crop(s)) for s in range(8, 14)) >= 5


@pytest.mark.parametrize("bucket", [(16, 64), (64, 16), (24, 40)])
def test_a_bucket_is_covered_then_cropped_within_the_cover(bucket):
    """An (height, width) bucket: resized to cover it (one side exact), cropped to it; a random crop stays inside."""
    img = Image.fromarray(np.random.default_rng(0).integers(0, 256, (50, 200, 3), dtype=np.uint8))  # 200 x 50
    height, width = bucket
    new_w, new_h = resized_size(200, 50, bucket)
    assert (new_w == width or new_h == height) and new_w >= width and new_h >= height
    for seed in range(5):
        left, top, right, bottom = crop_box((new_w, new_h), bucket, center_crop=False, crop_rng_seed=seed)
        assert 0 <= left and right <= new_w and 0 <= top and bottom <= new_h
        assert preprocess_image(img, bucket, center_crop=False, flip=False, crop_rng_seed=seed).shape == (3, *bucket)


def test_flip_decision_and_crop_seed_are_pure():
    torch_state, py_state, np_state = torch.random.get_rng_state(), random.getstate(), np.random.get_state()
    draws = [flip_decision(1234, epoch, i) for epoch in range(2) for i in range(500)]
    assert draws == [flip_decision(1234, epoch, i) for epoch in range(2) for i in range(500)]
    assert 400 <= sum(draws) <= 600
    assert draws[:500] != draws[500:]  # a sample is not flipped the same way every epoch
    assert draws != [flip_decision(99, epoch, i) for epoch in range(2) for i in range(500)]
    assert crop_seed(1, "a.png") == crop_seed(1, "a.png")
    assert len({crop_seed(1, "a.png"), crop_seed(2, "a.png"), crop_seed(1, "b.png")}) == 3
    assert torch.equal(torch.random.get_rng_state(), torch_state)
    assert random.getstate() == py_state
    assert all(np.array_equal(a, b) if isinstance(a, np.ndarray) else a == b
               for a, b in zip(np.random.get_state(), np_state))
