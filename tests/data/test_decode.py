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
from dit_lora.core.errors import UserError


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


# ---------------------------------------------------------------------------------------------
# Every Pillow mode to 8-bit sRGB, against references computed with numpy from the stored values
# ---------------------------------------------------------------------------------------------
# The module is read through its attributes (decode.load_rgb), so that run against the code before these
# rules each case fails on its own pixels rather than the whole file on an import.

import colorsys  # noqa: E402
import io  # noqa: E402
import struct  # noqa: E402
import zlib  # noqa: E402

from PIL import ImageCms  # noqa: E402

from dit_lora.data import decode, preflight  # noqa: E402
from dit_lora.data import video as video_data  # noqa: E402

RNG = np.random.default_rng(0)


def grey_rgb(values: np.ndarray) -> np.ndarray:
    return np.repeat(values[..., None], 3, axis=-1)


def on_white(rgb: np.ndarray, alpha: np.ndarray) -> np.ndarray:
    """Straight (not premultiplied) colour composited on white, in float: the reference for every alpha mode."""
    a = alpha.astype(np.float64)[..., None] / 255
    return rgb.astype(np.float64) * a + 255 * (1 - a)


def sixteen_bit_png(path, values: np.ndarray, colour_type: int) -> None:
    """A 16-bit PNG written byte by byte (Pillow writes no 48/64-bit PNG): colour type 2 = RGB, 6 = RGBA."""
    height, width = values.shape[:2]
    rows = b"".join(b"\0" + values[y].astype(">u2").tobytes() for y in range(height))

    def chunk(kind: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))

    header = struct.pack(">IIBBBBB", width, height, 16, colour_type, 0, 0, 0)
    path.write_bytes(b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", header) + chunk(b"IDAT", zlib.compress(rows))
                     + chunk(b"IEND", b""))


def linear_rgb_profile() -> bytes:
    """Pillow's sRGB profile with gamma-1.0 curves: an RGB profile that is not sRGB, whose conversion to sRGB is
    the sRGB transfer function (sRGB's primaries and white are kept), so numpy can compute the reference."""
    data = bytearray(ImageCms.ImageCmsProfile(ImageCms.createProfile("sRGB")).tobytes())
    data[84:100] = bytes(16)  # no profile ID (its MD5 would no longer match)
    for i in range(struct.unpack(">I", data[128:132])[0]):
        entry = 132 + 12 * i
        if data[entry:entry + 4] in (b"rTRC", b"gTRC", b"bTRC"):
            offset = struct.unpack(">I", data[entry + 4:entry + 8])[0]
            data[offset:offset + 16] = b"para" + bytes(4) + struct.pack(">HHi", 0, 0, 1 << 16)  # y = x ** 1.0
            data[entry + 8:entry + 12] = struct.pack(">I", 16)
    return bytes(data).replace("sRGB".encode("utf-16-be"), "line".encode("utf-16-be"))


def srgb_encode(linear: np.ndarray) -> np.ndarray:
    return np.where(linear <= 0.0031308, 12.92 * linear, 1.055 * linear ** (1 / 2.4) - 0.055) * 255


def lab_to_srgb(light: np.ndarray, a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """CIELAB (L* 0..100, D50) to sRGB (Bradford-adapted to D65)."""
    fy = (light + 16) / 116
    fx, fz = fy + a / 500, fy - b / 200
    inv = lambda t: np.where(t ** 3 > 216 / 24389, t ** 3, (116 * t - 16) / (24389 / 27))  # noqa: E731
    xyz = np.stack([inv(fx) * 0.9642, inv(fy), inv(fz) * 0.8249], -1)
    d50_to_srgb = np.array([[3.1338561, -1.6168667, -0.4906146], [-0.9787684, 1.9161415, 0.0334540],
                            [0.0719453, -0.2289914, 1.4052427]])
    return srgb_encode(np.clip(xyz @ d50_to_srgb.T, 0, 1))


def case_i16_png(tmp_path):  # the tester's case: a 16-bit grey gradient
    values = np.tile(np.linspace(0, 65535, 64).round().astype(np.uint16), (8, 1))
    Image.fromarray(values).save(tmp_path / "i16.png")
    return tmp_path / "i16.png", grey_rgb(np.round(values * 255.0 / 65535))


def case_i16b_tiff(tmp_path):
    values = RNG.integers(0, 65536, (8, 16), dtype=np.uint16)
    Image.frombytes("I;16B", (16, 8), values.astype(">u2").tobytes()).save(tmp_path / "i16b.tif")
    assert Image.open(tmp_path / "i16b.tif").mode == "I;16B"
    return tmp_path / "i16b.tif", grey_rgb(np.round(values * 255.0 / 65535))


def case_i16l_image(tmp_path):
    values = RNG.integers(0, 65536, (8, 16), dtype=np.uint16)
    return Image.frombytes("I;16L", (16, 8), values.astype("<u2").tobytes()), grey_rgb(np.round(values * 255.0 / 65535))


def case_i16_transparent_png(tmp_path):
    values = RNG.integers(0, 65536, (8, 16), dtype=np.uint16)
    values[0, :4] = 1000
    Image.fromarray(values).save(tmp_path / "i16t.png", transparency=1000)
    return tmp_path / "i16t.png", on_white(grey_rgb(np.round(values * 255.0 / 65535)),
                                           np.where(values == 1000, 0, 255))


def case_i32_tiff(tmp_path):
    values = RNG.integers(0, 65536, (8, 16)).astype(np.int32)
    Image.fromarray(values).save(tmp_path / "i32.tif")
    assert Image.open(tmp_path / "i32.tif").mode == "I"
    return tmp_path / "i32.tif", grey_rgb(np.round(values * 255.0 / 65535))


def case_float_tiff(tmp_path):
    values = RNG.random((8, 16), dtype=np.float32)
    Image.fromarray(values).save(tmp_path / "f.tif")
    assert Image.open(tmp_path / "f.tif").mode == "F"
    return tmp_path / "f.tif", grey_rgb(np.round(values.astype(np.float64) * 255))


def case_rgb48_png(tmp_path):
    values = RNG.integers(0, 65536, (8, 16, 3), dtype=np.uint16)
    sixteen_bit_png(tmp_path / "rgb48.png", values, 2)
    return tmp_path / "rgb48.png", np.round(values / 257.0)


def case_rgba64_png(tmp_path):
    values = RNG.integers(0, 65536, (8, 16, 4), dtype=np.uint16)
    values[..., 3] = RNG.integers(0, 256, (8, 16)) * 257  # alpha on exact 8-bit steps: the reference is exact
    sixteen_bit_png(tmp_path / "rgba64.png", values, 6)
    return tmp_path / "rgba64.png", on_white(np.round(values[..., :3] / 257.0), values[..., 3] // 257)


def case_bilevel_png(tmp_path):
    bits = RNG.random((8, 16)) > 0.5
    Image.fromarray(bits).save(tmp_path / "one.png")
    assert Image.open(tmp_path / "one.png").mode == "1"
    return tmp_path / "one.png", grey_rgb(bits * 255.0)


def case_l_png(tmp_path):
    values = RNG.integers(0, 256, (8, 16), dtype=np.uint8)
    Image.fromarray(values).save(tmp_path / "l.png")
    return tmp_path / "l.png", grey_rgb(values.astype(float))


def case_la_png(tmp_path):
    values = RNG.integers(0, 256, (8, 16, 2), dtype=np.uint8)
    Image.merge("LA", [Image.fromarray(values[..., 0]), Image.fromarray(values[..., 1])]).save(tmp_path / "la.png")
    return tmp_path / "la.png", on_white(grey_rgb(values[..., 0]), values[..., 1])


def palette_image(tmp_path, name, **save):
    palette = RNG.integers(0, 256, (256, 3), dtype=np.uint8)
    indices = RNG.integers(0, 256, (8, 16), dtype=np.uint8)
    image = Image.frombytes("P", (16, 8), indices.tobytes())
    image.putpalette(palette.tobytes())
    image.save(tmp_path / name, **save)
    return tmp_path / name, indices, palette


def case_p_png(tmp_path):
    path, indices, palette = palette_image(tmp_path, "p.png")
    return path, palette[indices].astype(float)


def case_p_transparent_index_png(tmp_path):
    path, indices, palette = palette_image(tmp_path, "pt.png", transparency=int(0))
    return path, on_white(palette[indices], np.where(indices == 0, 0, 255))


def case_p_palette_alpha_png(tmp_path):
    alphas = RNG.integers(0, 256, 256, dtype=np.uint8)
    path, indices, palette = palette_image(tmp_path, "pa.png", transparency=alphas.tobytes())
    return path, on_white(palette[indices], alphas[indices])


def case_pa_tiff(tmp_path):
    path, indices, palette = palette_image(tmp_path, "base.png")
    alpha = RNG.integers(0, 256, (8, 16), dtype=np.uint8)
    image = Image.open(path).convert("PA")
    image.putalpha(Image.fromarray(alpha))
    image.save(tmp_path / "pa.tif")
    assert Image.open(tmp_path / "pa.tif").mode == "PA"
    return tmp_path / "pa.tif", on_white(palette[indices], alpha)


def case_rgb_png(tmp_path):
    values = RNG.integers(0, 256, (8, 16, 3), dtype=np.uint8)
    Image.fromarray(values).save(tmp_path / "rgb.png")
    return tmp_path / "rgb.png", values.astype(float)


def case_rgba_png(tmp_path):
    values = RNG.integers(0, 256, (8, 16, 4), dtype=np.uint8)
    Image.fromarray(values).save(tmp_path / "rgba.png")
    return tmp_path / "rgba.png", on_white(values[..., :3], values[..., 3])


def case_rgba_premultiplied(tmp_path):  # RGBa: only ever an in-memory image (a dataset cell)
    colour = RNG.integers(0, 256, (8, 16, 3), dtype=np.uint8)
    alpha = RNG.integers(1, 256, (8, 16), dtype=np.uint8)
    premultiplied = np.round(colour * (alpha[..., None] / 255.0)).astype(np.uint8)
    image = Image.frombytes("RGBa", (16, 8), np.dstack([premultiplied, alpha]).tobytes())
    return image, premultiplied + (255.0 - alpha[..., None])  # premultiplied colour over white


def case_la_premultiplied(tmp_path):
    grey = RNG.integers(0, 256, (8, 16), dtype=np.uint8)
    alpha = RNG.integers(1, 256, (8, 16), dtype=np.uint8)
    premultiplied = np.round(grey * (alpha / 255.0)).astype(np.uint8)
    image = Image.frombytes("La", (16, 8), np.dstack([premultiplied, alpha]).tobytes())
    return image, grey_rgb(premultiplied + (255.0 - alpha))


def cmyk_reference(cmyk: np.ndarray) -> np.ndarray:
    cmyk = cmyk.astype(np.float64)
    return (255 - cmyk[..., :3]) * (255 - cmyk[..., 3:]) / 255


def case_cmyk_jpeg(tmp_path):
    """Pillow writes CMYK JPEGs the Adobe way (an APP14 marker, inverted values) and un-inverts them on reading."""
    written = np.zeros((16, 16, 4), dtype=np.uint8)
    written[:, :8] = (30, 200, 90, 10)  # flat 8x8 blocks: JPEG keeps them within a level or two
    written[:, 8:] = (220, 15, 140, 60)
    Image.frombytes("CMYK", (16, 16), written.tobytes()).save(tmp_path / "cmyk.jpg", quality=100)
    reopened = Image.open(tmp_path / "cmyk.jpg")
    assert reopened.mode == "CMYK" and "adobe" in reopened.info
    stored = np.asarray(reopened)
    assert np.abs(stored.astype(int) - written).max() <= 2  # not inverted
    return tmp_path / "cmyk.jpg", cmyk_reference(stored)


def case_cmyk_tiff(tmp_path):
    values = RNG.integers(0, 256, (8, 16, 4), dtype=np.uint8)
    Image.frombytes("CMYK", (16, 8), values.tobytes()).save(tmp_path / "cmyk.tif")
    return tmp_path / "cmyk.tif", cmyk_reference(values)


def case_ycbcr_tiff(tmp_path):
    values = RNG.integers(60, 200, (8, 16, 3), dtype=np.uint8)
    Image.frombytes("YCbCr", (16, 8), values.tobytes()).save(tmp_path / "ycbcr.tif")
    assert Image.open(tmp_path / "ycbcr.tif").mode == "YCbCr"
    y, cb, cr = (values[..., i].astype(np.float64) for i in range(3))
    rgb = np.stack([y + 1.402 * (cr - 128), y - 0.344136 * (cb - 128) - 0.714136 * (cr - 128), y + 1.772 * (cb - 128)],
                   -1)
    return tmp_path / "ycbcr.tif", np.clip(rgb, 0, 255)


def case_lab_tiff(tmp_path):
    """A CIELAB TIFF stores L* as 0..255 and a*, b* as signed bytes; Pillow keeps them so in memory."""
    light = RNG.integers(90, 220, (8, 16)).astype(np.uint8)
    a, b = (RNG.integers(-15, 16, (8, 16)).astype(np.int8) for _ in range(2))  # within sRGB's gamut: no clipping
    raw = np.dstack([light, a.view(np.uint8), b.view(np.uint8)])
    Image.frombytes("LAB", (16, 8), raw.tobytes()).save(tmp_path / "lab.tif")
    assert Image.open(tmp_path / "lab.tif").mode == "LAB"
    return tmp_path / "lab.tif", lab_to_srgb(light * 100.0 / 255, a.astype(np.float64), b.astype(np.float64))


def case_hsv_image(tmp_path):
    values = RNG.integers(0, 256, (8, 16, 3), dtype=np.uint8)
    reference = np.array([[colorsys.hsv_to_rgb(*(v / 255.0)) for v in row] for row in values]) * 255
    return Image.frombytes("HSV", (16, 8), values.tobytes()), reference


def case_display_profile_png(tmp_path):
    values = RNG.integers(0, 256, (8, 16, 3), dtype=np.uint8)
    Image.fromarray(values).save(tmp_path / "linear.png", icc_profile=linear_rgb_profile())
    return tmp_path / "linear.png", srgb_encode(values / 255.0)


def case_srgb_profile_png(tmp_path):  # an sRGB profile changes nothing: the stored values are the pixels
    values = RNG.integers(0, 256, (8, 16, 3), dtype=np.uint8)
    srgb = ImageCms.ImageCmsProfile(ImageCms.createProfile("sRGB")).tobytes()
    Image.fromarray(values).save(tmp_path / "srgb.png", icc_profile=srgb)
    return tmp_path / "srgb.png", values.astype(float)


CASES = {name[len("case_"):]: fn for name, fn in sorted(globals().items()) if name.startswith("case_")}


def as_array(image: Image.Image) -> np.ndarray:
    assert image.mode == "RGB"
    return np.asarray(image).astype(np.int64)


#: LittleCMS converts 8-bit Lab through an interpolated table (its optimisation of 8-bit transforms), a few levels
#: from the exact formula; every other mode is within one level
TOLERANCE = {"lab_tiff": 5}


def within_one_level(decoded: np.ndarray, reference: np.ndarray, case: str = "") -> None:
    assert decoded.shape == reference.shape
    worst = np.abs(decoded - np.rint(reference)).max()
    assert worst <= TOLERANCE.get(case, 1), f"{worst} levels from the reference"


@pytest.mark.parametrize("case", CASES)
def test_every_mode_decodes_to_its_reference_conversion(tmp_path, case):
    source, reference = CASES[case](tmp_path)
    within_one_level(as_array(decode.load_rgb(str(source) if not isinstance(source, Image.Image) else source)),
                     reference, case)


class _Cells:
    """A dataset's image column holding decoded images (what ``RawSample`` meets for a ``datasets`` Image cell)."""

    def __init__(self, image):
        self.image = image

    def raw(self, row):
        return self.image


def sample_of(source) -> RawSample:
    if isinstance(source, Image.Image):
        return RawSample(key="cell[0]", caption="c", _images=_Cells(source), _row=0)
    return RawSample(key=os.path.basename(source), caption="c", path=str(source))


@pytest.mark.parametrize("case", CASES)
def test_check_data_and_training_see_the_same_pixels(tmp_path, case, monkeypatch):
    """check-data (check_sample) and training (RawSample.open_image -> preprocess_image) decode by one function:
    identical tensors, both equal to the reference (at the image's own size the preprocessing only rescales)."""
    source, reference = CASES[case](tmp_path)
    height, width = reference.shape[:2]
    seen = []
    real = preflight.preprocess_image
    monkeypatch.setattr(preflight, "preprocess_image", lambda *a, **k: seen.append(real(*a, **k)) or seen[-1])
    row = preflight.check_sample(sample_of(source), resolution=(height, width))
    assert row.status == "ok", row.problem
    training = preprocess_image(sample_of(source).open_image(resolution=(height, width)), (height, width),
                                center_crop=True, flip=False, crop_rng_seed=0)
    assert torch_equal(seen[0], training)
    within_one_level(np.rint((training.permute(1, 2, 0).numpy() + 1) * 127.5).astype(np.int64), reference, case)


def torch_equal(a, b) -> bool:
    import torch

    return bool(torch.equal(a, b))


FILE_CASES = [case for case in CASES if case not in ("i16l_image", "rgba_premultiplied", "la_premultiplied",
                                                     "hsv_image")]


@pytest.mark.parametrize("case", FILE_CASES)
def test_images_inside_video_data_sets_decode_alike(tmp_path, case):
    source, reference = CASES[case](tmp_path)
    height, width = reference.shape[:2]
    clip = video_data.decode_image_clip(source, height, width)
    within_one_level(np.rint((clip[0].permute(1, 2, 0).numpy() + 1) * 127.5).astype(np.int64), reference, case)


def test_the_testers_16_bit_gradient_is_mid_grey_not_white(tmp_path):
    path, _ = case_i16_png(tmp_path)
    assert abs(np.asarray(decode.load_rgb(str(path))).mean() - 127.5) < 0.5  # Pillow's convert gave 254.5


@pytest.mark.parametrize("orientation", range(1, 9))
@pytest.mark.parametrize("resolution", [None, 8])
def test_all_eight_exif_orientations_at_full_size_and_reduced(tmp_path, orientation, resolution):
    stored = RNG.integers(0, 256, (8, 12, 3), dtype=np.uint8).repeat(8, 0).repeat(8, 1)  # 64 x 96, 8x8 blocks
    upright = {1: stored, 2: stored[:, ::-1], 3: stored[::-1, ::-1], 4: stored[::-1], 5: stored.transpose(1, 0, 2),
               6: np.rot90(stored, -1), 7: np.rot90(stored, 2).transpose(1, 0, 2), 8: np.rot90(stored, 1)}[orientation]
    image = Image.fromarray(stored)
    exif = image.getexif()
    exif[0x0112] = orientation
    image.save(tmp_path / "o.png", exif=exif)
    decoded = as_array(decode.load_rgb(str(tmp_path / "o.png"), resolution=resolution))
    factor = upright.shape[0] // decoded.shape[0]
    assert factor == (1 if resolution is None else 4)  # 8 px of training from 64: decoded 4 times smaller
    reference = upright.reshape(upright.shape[0] // factor, factor, upright.shape[1] // factor, factor, 3).mean((1, 3))
    within_one_level(decoded, reference)


@pytest.mark.parametrize("values, reason", [
    (np.array([[0.0, 2.0]], dtype=np.float32), "mode F) with values from 0 to 2"),
    (np.array([[0.0, np.nan]], dtype=np.float32), "mode F) with 1 NaN/Inf values"),
    (np.array([[0, 70000]], dtype=np.int32), "mode I) with values from 0 to 70000"),
    (np.array([[-5, 100]], dtype=np.int32), "mode I) with values from -5 to 100"),
])
def test_deep_images_of_unknown_scale_are_quarantined_with_the_reason_never_clipped(tmp_path, values, reason):
    Image.fromarray(values).save(tmp_path / "deep.tif")
    keep = Image.new("RGB", (4, 4))
    keep.save(tmp_path / "keep.png")
    samples = [RawSample(key="deep.tif", caption="c", path=str(tmp_path / "deep.tif")),
               RawSample(key="keep.png", caption="c", path=str(tmp_path / "keep.png"))]
    quarantine, lines = [], []
    kept = validate_samples(samples, max_bad_samples_fraction=0.5, log=lines.append, quarantine=quarantine,
                            num_workers=1)
    assert [s.key for s in kept] == ["keep.png"]
    assert quarantine[0]["reason"].startswith("cannot be converted to 8-bit RGB faithfully: ")
    assert reason in quarantine[0]["reason"] and "Save it as an 8- or 16-bit image" in quarantine[0]["reason"]
    row = preflight.check_sample(samples[0], resolution=4)
    assert row.status == "block" and reason in row.problem


def animation(tmp_path, name):
    frames = [Image.new("RGB", (16, 16), colour) for colour in ((200, 0, 0), (0, 200, 0), (0, 0, 200))]
    frames[0].save(tmp_path / name, save_all=True, append_images=frames[1:], lossless=True)
    return tmp_path / name


def test_animated_images_train_on_their_first_frame_counted_once_and_check_data_warns(tmp_path):
    paths = [animation(tmp_path, name) for name in ("a.gif", "b.png", "c.webp")]
    still = tmp_path / "still.png"
    Image.new("RGB", (16, 16), (9, 9, 9)).save(still)
    samples = [RawSample(key=p.name, caption="c", path=str(p)) for p in paths + [still]]
    for path in paths:
        image = decode.load_rgb(str(path), resolution=16)
        assert np.abs(as_array(image) - (200, 0, 0)).max() <= 1  # the first frame
        assert decode.decode_notes(image) and "training uses its first frame" in decode.decode_notes(image)[0]
    lines: list[str] = []
    assert len(validate_samples(samples, resolution=16, log=lines.append, num_workers=2)) == 4  # none refused
    assert lines == ["3 animated images (APNG, GIF, WebP): training uses their first frame (a.gif, b.png, c.webp)"]
    rows = preflight.check_samples(samples, resolution=16, num_workers=1)
    assert [row.status for row in rows] == ["warn", "warn", "warn", "ok"]
    assert rows[0].problem == "animated GIF (3 frames): training uses its first frame"
    assert rows[1].problem == "animated APNG (3 frames): training uses its first frame"


def test_an_unreadable_colour_profile_is_ignored_with_a_note(tmp_path):
    values = RNG.integers(0, 256, (8, 8, 3), dtype=np.uint8)
    Image.fromarray(values).save(tmp_path / "broken.png", icc_profile=b"not a profile at all" * 10)
    image = decode.load_rgb(str(tmp_path / "broken.png"))
    assert np.array_equal(as_array(image), values)
    assert decode.decode_notes(image) == ["its embedded colour profile is unreadable: decoded as sRGB"]
    assert "icc_profile" not in image.info  # the pixels returned are sRGB, whatever the file said
