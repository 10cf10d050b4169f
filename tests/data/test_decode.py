"""Tests for dit_lora.data.decode: the pixel budget, reduced decoding, and decode threads sized by memory."""

from __future__ import annotations

import os
import warnings

import numpy as np
import pytest
from PIL import Image, ImageFile

from dit_lora.data import RawSample, validate_samples
from dit_lora.data.decode import ImageTooLarge, decode_workers, load_rgb, pixel_budget
from dit_lora.data.transforms import preprocess_image
from dit_lora.errors import UserError


def palette_bomb(path, side: int, transparent: bool = False):
    """A tiny file of a huge palette image (a few KB for ``side`` in the thousands): index 0 (black, transparent
    with ``transparent``) everywhere but a red first row."""
    image = Image.new("P", (side, side), 0)
    image.putpalette([0, 0, 0, 200, 30, 30] * 128)
    image.paste(1, (0, 0, side, 1))
    image.save(path, **({"transparency": 0} if transparent else {}))
    return path


@pytest.fixture
def loads(monkeypatch):
    """The (mode, size) of every image Pillow decodes (``ImageFile.load``) and every conversion it makes."""
    seen = {"load": [], "convert": []}
    real_load, real_convert = ImageFile.ImageFile.load, Image.Image.convert

    def load(self):
        if self.tile:
            seen["load"].append((self.mode, self.size))
        return real_load(self)

    def convert(self, mode=None, *args, **kwargs):
        seen["convert"].append((self.mode, mode, self.size))
        return real_convert(self, mode, *args, **kwargs)

    monkeypatch.setattr(ImageFile.ImageFile, "load", load)
    monkeypatch.setattr(Image.Image, "convert", convert)
    return seen


def test_pixel_budget_follows_the_resolution_with_a_floor_and_the_flag_sets_it():
    assert pixel_budget(64) == 8192 * 8192  # a floor: camera photos pass at any training size
    assert pixel_budget(1024) == 64 * 1024 * 1024
    assert pixel_budget(2048) == 64 * 2048 * 2048  # 8 times the training size on each side
    assert pixel_budget((1024, 2048)) == 64 * 1024 * 2048
    assert pixel_budget(64, 1000) == 1000


def test_a_palette_bomb_is_refused_from_its_header_with_our_message_only(tmp_path, loads):
    path = palette_bomb(tmp_path / "bomb.png", 13000)
    assert path.stat().st_size < 300_000  # a small file ...
    sample = RawSample(key="bomb.png", caption="c", path=str(path))
    quarantine: list[dict] = []
    lines: list[str] = []
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # Pillow's raw DecompressionBombWarning would fail here
        with pytest.raises(UserError, match="None of the 1 training images can be used"):
            validate_samples([sample], resolution=64, log=lines.append, quarantine=quarantine, num_workers=1,
                             raise_on_fraction=False)
    assert loads["load"] == []  # ... refused before a single pixel was decoded
    reason = quarantine[0]["reason"]
    assert reason.startswith("image too large: 13000x13000 pixels (169 MP")
    assert "beyond the pixel budget of 67 MP" in reason and "--max_image_pixels" in reason
    assert any("skipping bomb.png: image too large" in line for line in lines)


def test_the_budget_lifts_and_a_lifted_bomb_decodes_reduced_in_strips(tmp_path, loads, monkeypatch):
    monkeypatch.setattr(Image, "MAX_IMAGE_PIXELS", Image.MAX_IMAGE_PIXELS)  # a lifted budget raises Pillow's; restore
    path = palette_bomb(tmp_path / "bomb.png", 9000, transparent=True)  # 81 MP: beyond the 67 MP default
    with pytest.raises(ImageTooLarge, match="9000x9000"):
        load_rgb(str(path), resolution=64, max_pixels=pixel_budget(64))
    image = load_rgb(str(path), resolution=64, max_pixels=100_000_000)
    assert image.mode == "RGB" and image.size == (129, 129)  # reduced 70 times: still twice the 64 px it is resized to
    # Decoded once as palette (1 byte a pixel); never converted to RGB(A) at full size, only strip by strip.
    assert loads["load"] == [("P", (9000, 9000))]
    assert max(w * h for _, _, (w, h) in loads["convert"]) <= 9000 * 512
    pixels = np.asarray(image)
    assert (pixels[1:] == 255).all()  # transparent black composited onto white, as at full size
    assert (pixels[0] != 255).any()  # the red first row is averaged into the first reduced row
    # The strips are exact: the same as reducing the whole image at once.
    small = palette_bomb(tmp_path / "small.png", 1500)
    with Image.open(small) as whole:
        expected = whole.convert("RGB").reduce(11)
    assert np.array_equal(np.asarray(load_rgb(str(small), resolution=64)), np.asarray(expected))


def test_a_large_jpeg_is_decoded_reduced_by_the_decoder(tmp_path, loads):
    rng = np.random.default_rng(0)
    base = rng.integers(0, 256, (64, 64, 3), dtype=np.uint8)
    Image.fromarray(base).resize((4096, 4096), Image.BILINEAR).save(tmp_path / "big.jpg", quality=95)
    full = load_rgb(str(tmp_path / "big.jpg"))  # no resolution: full size, as before
    loads["load"].clear()
    reduced = load_rgb(str(tmp_path / "big.jpg"), resolution=64)
    assert full.size == (4096, 4096)
    assert loads["load"] == [("RGB", (512, 512))]  # the decoder's 1/8 scale: 1/64 of the pixels in memory
    assert reduced.size == (128, 128)
    # Trained pixels stay close to those of a full decode (both are box/bilinear averages of the same image).
    ours = preprocess_image(reduced, 64, center_crop=True, flip=False, crop_rng_seed=0)
    theirs = preprocess_image(full, 64, center_crop=True, flip=False, crop_rng_seed=0)
    assert (ours - theirs).abs().mean() < 0.04  # 2% of the range, on noise at the training scale


def test_images_below_four_times_the_training_size_decode_exactly_as_before(tmp_path):
    rng = np.random.default_rng(1)
    Image.fromarray(rng.integers(0, 256, (200, 250, 4), dtype=np.uint8), "RGBA").save(tmp_path / "a.png")
    with Image.open(tmp_path / "a.png") as image:
        background = Image.new("RGBA", image.size, (255, 255, 255, 255))
        expected = Image.alpha_composite(background, image.convert("RGBA")).convert("RGB")
    got = load_rgb(str(tmp_path / "a.png"), resolution=64)
    assert got.size == (250, 200) and np.array_equal(np.asarray(got), np.asarray(expected))


def test_exif_rotation_applies_to_reduced_images(tmp_path):
    image = Image.new("RGB", (2000, 1000), (255, 0, 0))
    image.paste((0, 0, 255), (0, 0, 1000, 1000))  # blue left half
    exif = Image.Exif()
    exif[0x0112] = 6  # rotate 90 degrees clockwise to display
    image.save(tmp_path / "rot.jpg", exif=exif, quality=95)
    got = load_rgb(str(tmp_path / "rot.jpg"), resolution=64)
    assert got.size[0] < got.size[1]  # portrait, as displayed
    top = np.asarray(got)[: got.size[1] // 4].mean(axis=(0, 1))
    assert top[2] > 200 and top[0] < 60  # the blue half is on top after the rotation


def test_decode_threads_are_sized_by_memory():
    # 67 MP: a WebP at the budget peaks at ~1.0 GiB decoded (16 bytes per pixel, measured), sized at 17
    budget = pixel_budget(1024)
    assert decode_workers(budget, most=8, available=64 * 2**30) == min(8, os.cpu_count())
    assert decode_workers(budget, most=8, available=2 * 2**30) == 1  # was 3: four WebPs peaked at 4.2 GiB
    assert decode_workers(budget, most=8, available=9 * 2**30) == min(4, os.cpu_count())  # 4 x 1.06 GiB <= 4.5
    assert decode_workers(budget, most=8, available=100 * 2**20) == 1  # never none
    assert decode_workers(64 * 4096 * 4096, most=8, available=8 * 2**30) == 1  # Sana 4K budget on 8 GB


def test_validate_samples_uses_the_memory_sized_threads(tmp_path, monkeypatch):
    import dit_lora.data.validation as validation

    Image.new("RGB", (8, 8)).save(tmp_path / "a.png")
    Image.new("RGB", (8, 8)).save(tmp_path / "b.png")
    asked = []
    monkeypatch.setattr(validation, "decode_workers", lambda budget, most: asked.append((budget, most)) or 1)
    samples = [RawSample(key=n, caption="c", path=str(tmp_path / n)) for n in ("a.png", "b.png")]
    assert len(validate_samples(samples, resolution=1024, log=lambda _: None)) == 2
    assert asked == [(pixel_budget(1024), 8)]
