"""Decode training images with bounded memory: a pixel budget read from the header, reduced decoding.

A small file can hold a huge image: a 164 KB palette PNG of 13000 x 13000 pixels is under Pillow's own
hard limit, and decoding it, converting it to RGBA, compositing it on white and converting it to RGB
took 3.7 GB (7.2 GB for two in parallel). So, for every image a run or ``check-data`` reads:

* the size is read from the header (``Image.open`` is lazy) and an image beyond the *pixel budget*
  (:func:`pixel_budget`: 64 times the training resolution's pixels, at least 8192 x 8192; ``--max_image_pixels``
  sets it) is refused with one sentence, before any pixel is decoded. It replaces Pillow's own
  ``DecompressionBombWarning`` (hidden) and lifts Pillow's hard limit when the budget is set above it;
* an image much larger than what training needs (at least 4 times the resized size on each side) is
  decoded reduced: a JPEG at 1/2, 1/4 or 1/8 of its size by the decoder itself (``draft``), every image
  then box-reduced (``Image.reduce``) in strips of rows, each strip converted to RGB(A) on its own, so
  a palette image is never held as full-size RGBA. What remains is still at least twice the size the
  bilinear resize makes, as Pillow's own ``reducing_gap`` does; smaller images decode exactly as before;
* decoding threads are sized by memory (:func:`decode_workers`: available memory over the worst case of
  one image within the budget), not only by cores.

Every Pillow mode becomes 8-bit sRGB faithfully, or is refused (:class:`UnsupportedImage`, a quarantine reason),
never clipped: Pillow's own ``convert("RGB")`` clips 16- and 32-bit greyscale at 255 (a 16-bit PNG turns near
white). The rules (:func:`to_rgb`, shared by training, ``check-data`` and the video data sets):

* ``I;16``/``I;16B``/``I;16L`` (16-bit PNG, TIFF, PGM): ``round(v * 255 / 65535)``; ``I`` (32-bit integer, e.g.
  a TIFF, or a 16-bit PNG in older Pillow) is read as 16-bit data when all its values are within 0..65535 (the
  range PNG and PGM can hold) and refused otherwise; ``F`` (32-bit float) is read as 0 black .. 1 white when all
  its values are within [0, 1] and refused otherwise (no per-image stretching: it would change the brightness).
  A 16-bit grey PNG's transparent value (``tRNS``) is honoured. 16-bit RGB(A) PNGs are opened by Pillow as
  8-bit RGB(A) already (the high byte: within one level of ``round(v / 257)``);
* ``La``/``RGBa`` (premultiplied) are un-premultiplied, ``P``/``PA`` use their palette's and ``tRNS``'s alpha,
  ``CMYK`` (Adobe's inverted CMYK JPEGs are un-inverted by Pillow's decoder), ``YCbCr``, ``LAB``, ``HSV``, ``1``
  convert by Pillow's formulas; anything with alpha is composited on white;
* an embedded ICC profile that is not sRGB (Display P3, Adobe RGB, a CMYK press profile) is converted to sRGB
  with LittleCMS (``PIL.ImageCms``, perceptual intent), as browsers do; an unreadable profile, or one that does
  not fit the pixels, is ignored with a note (:func:`decode_notes`);
* an animated image (GIF, APNG, WebP) or a multi-page TIFF is decoded at its first frame, with a note, which
  training counts once per run and ``check-data`` shows as a warning.
"""

from __future__ import annotations

import io
import os
import re
import warnings
from typing import cast

import numpy as np
from PIL import Image, ImageCms, ImageOps

from dit_lora.data.transforms import Resolution, resized_size, target_size

__all__ = [
    "ImageTooLarge",
    "UnsupportedImage",
    "decode_notes",
    "decode_workers",
    "file_notes",
    "header_notes",
    "image_bytes",
    "load_rgb",
    "open_checked",
    "pixel_budget",
    "to_rgb",
    "too_large",
]

#: the default budget allows this many times the training resolution's pixels (8 times its size on each side) ...
BUDGET_FACTOR = 64
#: ... and never less than 8192 x 8192 pixels, so camera photos (up to ~60 MP) pass at any training resolution
MIN_BUDGET = 8192 * 8192
#: decode reduced only when the reduced image still has this many times the resized size on each side
REDUCING_GAP = 2
#: rows converted at once while reducing (a multiple of the factor): bounds the RGB(A) copy of a strip
_STRIP_ROWS = 512
#: Pillow's bytes per pixel by mode as it holds them (RGB is stored in 4 bytes); other modes count 4
_BYTES_PER_PIXEL = {"1": 1, "L": 1, "P": 1, "I;16": 2, "I;16B": 2, "I;16L": 2}
#: EXIF orientation -> the transpose that undoes it (the table ImageOps.exif_transpose applies)
_ORIENTATION = {
    2: Image.Transpose.FLIP_LEFT_RIGHT,
    3: Image.Transpose.ROTATE_180,
    4: Image.Transpose.FLIP_TOP_BOTTOM,
    5: Image.Transpose.TRANSPOSE,
    6: Image.Transpose.ROTATE_270,
    7: Image.Transpose.TRANSVERSE,
    8: Image.Transpose.ROTATE_90,
}


class ImageTooLarge(ValueError):
    """An image beyond the pixel budget; ``str(err)`` is the quarantine reason with the fix."""


class UnsupportedImage(ValueError):
    """An image whose pixels cannot be converted to 8-bit sRGB faithfully; ``str(err)`` is the reason with the fix."""


def pixel_budget(resolution: Resolution, max_image_pixels: int | None = None) -> int:
    """The most pixels an image may have: ``max_image_pixels`` when given, else 64 times the training
    resolution's pixels (8 times its size on each side), at least 8192 x 8192 (67 MP)."""
    if max_image_pixels:
        return int(max_image_pixels)
    height, width = target_size(resolution)
    return max(BUDGET_FACTOR * height * width, MIN_BUDGET)


def image_bytes(pixels: int, mode: str = "RGBA") -> int:
    """Bytes Pillow holds for ``pixels`` pixels decoded in ``mode``."""
    return pixels * _BYTES_PER_PIXEL.get(mode, 4)


#: Peak bytes per pixel above the baseline of one decode through :func:`load_rgb` (8190 x 8190, reduced for a
#: 512 px run; Pillow 11, measured with ru_maxrss, one and four in parallel alike): WebP's decoder holds the
#: whole image twice as RGBA before any reduction, whatever the file size (a 12 KB lossless file, 1 GiB).
DECODE_BYTES_PER_PIXEL = {"PNG": 4.6, "TIFF": 4.6, "GIF": 1.5, "JPEG": 0.5, "WEBP": 16.0}
#: what :func:`decode_workers` assumes of an image whose format it does not know: the worst measured, plus margin
WORST_DECODE_BYTES_PER_PIXEL = 17.0


def decode_workers(budget: int, *, most: int, available: int | None = None) -> int:
    """Threads that may decode at once: up to ``most`` and the CPU count, and as many as half the available
    memory holds images at the worst case within ``budget``: an image of the worst format's measured decode
    cost (:data:`DECODE_BYTES_PER_PIXEL`, WebP's 16 bytes per pixel) at the full budget."""
    if available is None:
        import psutil

        available = psutil.virtual_memory().available
    worst = int(budget * WORST_DECODE_BYTES_PER_PIXEL)
    by_memory = int(available // 2 // max(1, worst))
    return max(1, min(most, os.cpu_count() or 1, by_memory))


def _allow_budget(budget: int | None) -> None:
    """Our budget replaces Pillow's bomb check: hide its raw warning, and lift its hard limit to the budget
    when a user set the budget above it (only ever raised, so concurrent callers cannot lower it)."""
    # On every call, not once: a caller's warnings.catch_warnings() (pytest's, a notebook's) restores the filters.
    warnings.filterwarnings("ignore", category=Image.DecompressionBombWarning)
    if budget and Image.MAX_IMAGE_PIXELS is not None and budget > Image.MAX_IMAGE_PIXELS:
        Image.MAX_IMAGE_PIXELS = budget


def too_large(width: int, height: int, budget: int, what: str = "the pixel budget") -> ImageTooLarge:
    """The refusal of a ``width`` x ``height`` image beyond ``budget`` pixels."""
    pixels = width * height
    return ImageTooLarge(
        f"{width}x{height} pixels ({pixels / 1e6:.0f} MP, {image_bytes(pixels) / 2**30:.1f} GiB as RGB pixels) is beyond "
        f"{what} of {budget / 1e6:.0f} MP (refused before decoding: a small file can hold a huge image). Downscale "
        f"it, or raise --max_image_pixels (e.g. --max_image_pixels {pixels}) if it is meant to be used"
    )


def open_checked(source: str | bytes | Image.Image, max_pixels: int | None = None) -> Image.Image:
    """``Image.open`` (lazy: only the header is read) with the size checked against ``max_pixels`` first.

    Raises:
        ImageTooLarge: beyond ``max_pixels`` (or beyond Pillow's hard limit, when no budget is given).
    """
    if isinstance(source, Image.Image):
        if max_pixels and source.width * source.height > max_pixels:
            raise too_large(source.width, source.height, max_pixels)
        return source
    _allow_budget(max_pixels)
    try:
        image = Image.open(io.BytesIO(source) if isinstance(source, (bytes, bytearray)) else source)
    except Image.DecompressionBombError as err:  # beyond twice Pillow's limit, which is at least the budget
        found = re.search(r"\((\d+) pixels\)", str(err))
        pixels = int(found.group(1)) if found else 0
        limit = max_pixels or 2 * (Image.MAX_IMAGE_PIXELS or 0)
        raise ImageTooLarge(
            f"{pixels / 1e6:.0f} MP is beyond the pixel budget of {limit / 1e6:.0f} MP (refused "
            f"before decoding: a small file can hold a huge image). Downscale it, or raise "
            f"--max_image_pixels if it is meant to be used"
        ) from None
    if max_pixels and image.width * image.height > max_pixels:
        width, height = image.size
        image.close()
        raise too_large(width, height, max_pixels)
    return image


def oriented_size(source: str | bytes | Image.Image, max_pixels: int | None = None) -> tuple[int, int]:
    """(width, height) of an image as training sees it, read from its header without decoding: after its EXIF
    orientation (a portrait photo stored landscape with orientation 6 is portrait here)."""
    image = open_checked(source, max_pixels)
    try:
        width, height = image.size
        orientation = int(image.getexif().get(0x0112) or 1)
    finally:
        if image is not source:  # a decoded image handed in (a dataset cell) stays open for its owner
            image.close()
    return (height, width) if orientation in (5, 6, 7, 8) else (width, height)


def _reduce_factor(image: Image.Image, resolution: Resolution, orientation: int) -> int:
    """How many times smaller ``image`` may be decoded and still be ``REDUCING_GAP`` times what the resize needs."""
    width, height = image.size
    swapped = orientation in (5, 6, 7, 8)
    need_w, need_h = resized_size(height, width, resolution) if swapped else resized_size(width, height, resolution)
    if swapped:
        need_w, need_h = need_h, need_w
    return max(1, min(width // (REDUCING_GAP * need_w), height // (REDUCING_GAP * need_h)))


#: where :func:`load_rgb` leaves its notes on the image it returns (read them with :func:`decode_notes`)
_NOTES = "dit_lora.decode_notes"
#: an embedded ICC profile's colour space -> the mode of the colour channels it describes
_PROFILE_SPACES = {"RGB ": "RGB", "GRAY": "L", "CMYK": "CMYK"}
#: how a note names an animated format (Pillow calls an APNG a PNG)
_ANIMATED_NAMES = {"GIF": "GIF", "PNG": "APNG", "WEBP": "WebP"}


def _is_deep(mode: str) -> bool:
    """16-bit or 32-bit integer, or 32-bit float, greyscale: the modes Pillow's ``convert`` clips at 255."""
    return mode == "F" or mode.startswith("I")


def _colour_mode(mode: str) -> str:
    """The mode of an image's colour channels once :func:`_colour` has taken its alpha off."""
    if _is_deep(mode) or mode in ("1", "L", "LA", "La"):
        return "L"
    if mode in ("P", "PA", "RGB", "RGBA", "RGBa", "RGBX"):
        return "RGB"
    return mode


def _deep_to_grey(image: Image.Image) -> Image.Image:
    """A 16/32-bit greyscale image as 8-bit ``L`` (``LA`` when a grey value is transparent), scaled by the rules
    of the module docstring, or refused (:class:`UnsupportedImage`) when its scale is unknown."""
    values = np.asarray(image)
    if image.mode == "F":
        bad = int(values.size - np.isfinite(values).sum())
        low, high = (float(values.min()), float(values.max())) if values.size and not bad else (0.0, 0.0)
        if bad or low < 0 or high > 1:
            found = f"{bad} NaN/Inf values" if bad else f"values from {low:.4g} to {high:.4g}"
            raise UnsupportedImage(
                f"32-bit float greyscale image (mode F) with {found}: only 0 (black) to 1 (white) has a known "
                f"brightness, and stretching the image's own range would change it. Save it as an 8- or 16-bit image"
            )
        grey = np.rint(values.astype(np.float64) * 255).astype(np.uint8)
    else:
        low, high = (int(values.min()), int(values.max())) if values.size else (0, 0)
        if low < 0 or high > 65535:
            raise UnsupportedImage(
                f"32-bit integer greyscale image (mode {image.mode}) with values from {low} to {high}: only 0..65535 "
                f"(16-bit data) has a known brightness, and stretching the image's own range would change it. Save "
                f"it as an 8- or 16-bit image"
            )
        scaled = values.astype(np.uint32)
        scaled *= 255
        scaled += 32767  # round(v * 255 / 65535), in integers
        scaled //= 65535
        grey = scaled.astype(np.uint8)
    out = Image.fromarray(grey)
    transparent = image.info.get("transparency")
    if isinstance(transparent, int) and image.mode != "F":
        out.putalpha(Image.fromarray(np.where(values == transparent, 0, 255).astype(np.uint8)))
    return out


def _colour(image: Image.Image, transform: ImageCms.ImageCmsTransform | None) -> Image.Image:
    """A new 8-bit sRGB image of ``image``: RGB, or RGBA when it has transparency (composited by the caller, after
    any reduction); ``transform`` converts the colour channels from the embedded profile (:func:`_embedded_profile`)."""
    mode = image.mode
    if _is_deep(mode):
        image = _deep_to_grey(image)
    elif mode == "1":
        transparent = image.info.get("transparency")
        image = image.convert("L")
        if transparent in (0, 1):
            image = _with_transparency(image, 255 * transparent)
    elif mode in ("La", "RGBa"):
        image = image.convert("LA" if mode == "La" else "RGBA")  # un-premultiplied (Pillow converts La only to LA)
    if image.mode in ("P", "PA") or (image.mode == "RGB" and "transparency" in image.info):
        image = image.convert("RGBA")  # the palette's alpha, tRNS
    elif image.mode == "L" and "transparency" in image.info:
        image = image.convert("LA")
    alpha = image.getchannel("A") if image.mode in ("RGBA", "LA") else None
    colour = image.convert("RGB" if image.mode == "RGBA" else "L") if alpha is not None else image
    try:
        if transform is not None and colour.mode == transform.input_mode:
            # None only with inPlace=True (not transform.apply: applyTransform raises PyCMSError, not ValueError)
            rgb = cast(Image.Image, ImageCms.applyTransform(colour, transform))
        else:
            rgb = colour.convert("RGB")
    except ValueError as err:
        raise UnsupportedImage(
            f"pixel mode {mode} has no conversion to RGB ({err}); save it as an 8-bit RGB image"
        ) from None
    if alpha is not None:
        rgb.putalpha(alpha)
    return rgb


def _with_transparency(image: Image.Image, value: int) -> Image.Image:
    image = image.copy()
    image.info["transparency"] = value
    return image


def _on_white(image: Image.Image) -> Image.Image:
    """RGB(A) to RGB: transparency composited onto white, because the colour under fully transparent pixels is
    arbitrary (often black) and would be learned."""
    if image.mode != "RGBA":
        return image
    background = Image.new("RGBA", image.size, (255, 255, 255, 255))
    return Image.alpha_composite(background, image).convert("RGB")


def _embedded_profile(image: Image.Image) -> tuple[ImageCms.ImageCmsTransform | None, str | None]:
    """The transform from ``image``'s embedded ICC profile to sRGB (None when it has none or it is sRGB already),
    and a note when the profile is there but ignored (unreadable, or for other pixels than the image has)."""
    icc = image.info.get("icc_profile")
    if not icc:
        return None, None
    try:
        profile = ImageCms.ImageCmsProfile(io.BytesIO(icc))
        description = " ".join(ImageCms.getProfileDescription(profile).split())
    except (ImageCms.PyCMSError, OSError, ValueError, TypeError):
        return None, "its embedded colour profile is unreadable: decoded as sRGB"
    if "srgb" in description.lower():
        return None, None  # already what training expects: the pixels stay exactly as stored
    space = profile.profile.xcolor_space
    mode = _colour_mode(image.mode)
    if _PROFILE_SPACES.get(space) != mode:
        return None, (
            f"its embedded colour profile ({description or 'unnamed'}) is for {space.strip()} pixels, not "
            f"{image.mode}: ignored"
        )
    try:
        return ImageCms.buildTransform(profile, ImageCms.createProfile("sRGB"), mode, "RGB"), None
    except (ImageCms.PyCMSError, ValueError):
        return None, f"its embedded colour profile ({description or 'unnamed'}) cannot be applied: decoded as sRGB"


def _frames_note(image: Image.Image) -> str | None:
    """A note when ``image`` holds several frames (animated GIF, APNG, WebP; multi-page TIFF): training uses the
    first. A camera's MPO (a JPEG with preview images) is one picture and gets none."""
    if image.format == "MPO" or not getattr(image, "is_animated", False):
        return None
    frames = getattr(image, "n_frames", 0)
    if image.format == "TIFF":
        return f"multi-page TIFF ({frames} pages): training uses its first page"
    kind = image.format or "image"  # an opened animated file always has a format
    return f"animated {_ANIMATED_NAMES.get(kind, kind)} ({frames} frames): training uses its first frame"


def header_notes(image: Image.Image) -> list[str]:
    """What decoding ``image`` (opened, not yet loaded) will do that its user should hear, from its header alone:
    an animated image's first frame only, an embedded colour profile ignored."""
    notes = [_frames_note(image), _embedded_profile(image)[1]]
    return [note for note in notes if note]


def file_notes(path: str | os.PathLike, max_pixels: int | None = None) -> list[str]:
    """:func:`header_notes` of the image file at ``path`` (opened within ``max_pixels``, never decoded)."""
    with open_checked(os.fspath(path), max_pixels) as image:
        return header_notes(image)


def decode_notes(image: Image.Image) -> list[str]:
    """The notes :func:`load_rgb` left on the image it returned (see :func:`header_notes`)."""
    return list(image.info.get(_NOTES, ()))


def _reduced(image: Image.Image, factor: int, transform: ImageCms.ImageCmsTransform | None) -> Image.Image:
    """``image`` box-reduced ``factor`` times as RGB or RGBA, converting one strip of rows at a time."""
    width, height = image.size
    out: Image.Image | None = None
    rows = max(factor, _STRIP_ROWS // factor * factor)  # strips start at multiples of the factor: exact blocks
    for top in range(0, height, rows):
        strip = _colour(image.crop((0, top, width, min(height, top + rows))), transform).reduce(factor)
        if out is None:
            out = Image.new(strip.mode, (-(-width // factor), -(-height // factor)))
        out.paste(strip, (0, top // factor))
    assert out is not None  # a factor above 1 (_reduce_factor) means the image has rows: the loop ran
    return out


def to_rgb(image: Image.Image) -> Image.Image:
    """Always a new 8-bit sRGB image (so the caller may close the original), whatever Pillow mode ``image`` has:
    16/32-bit greyscale scaled (not clipped), an embedded colour profile converted to sRGB, transparency composited
    onto white (the rules are in the module docstring).

    Raises:
        UnsupportedImage: pixels whose conversion would not be faithful (a float image beyond [0, 1], ...).
    """
    return _on_white(_colour(image, _embedded_profile(image)[0]))


def load_rgb(
    source: str | bytes | Image.Image, *, resolution: Resolution | None = None, max_pixels: int | None = None
) -> Image.Image:
    """Decode ``source`` to 8-bit sRGB (:func:`to_rgb`), rotated per its EXIF orientation, within ``max_pixels``
    and reduced for ``resolution`` when it is much larger than training needs (see the module docstring).

    Without ``resolution`` the image is decoded at full size, as before; a source image is never closed,
    an image opened here always is. An animated image gives its first frame; what the user should hear about
    (:func:`header_notes`) is on the result, for :func:`decode_notes`.

    Raises:
        ImageTooLarge: beyond ``max_pixels``; UnsupportedImage: no faithful 8-bit conversion; Pillow's errors for
            unreadable, truncated or corrupt files.
    """
    image = open_checked(source, max_pixels)
    try:
        notes = [note for note in (_frames_note(image),) if note]
        transform, profile_note = _embedded_profile(image)
        notes += [profile_note] if profile_note else []
        orientation = int(image.getexif().get(0x0112) or 1) if resolution is not None else 1
        factor = _reduce_factor(image, resolution, orientation) if resolution is not None else 1
        if factor > 1 and image.format == "JPEG" and image is not source:
            width, height = image.size
            image.draft(None, (width // factor, height // factor))  # the decoder itself scales by 1/2, 1/4, 1/8
        image.load()
        if factor > 1 and resolution is not None:  # a factor above 1 came from a resolution
            factor = _reduce_factor(image, resolution, orientation)  # what the draft left to reduce
        if factor <= 1:
            rgb = _on_white(_colour(ImageOps.exif_transpose(image), transform))
        else:
            reduced = _reduced(image, factor, transform)
            if orientation in _ORIENTATION:
                reduced = reduced.transpose(_ORIENTATION[orientation])
            rgb = _on_white(reduced)
        rgb.info = {key: value for key, value in rgb.info.items() if key not in ("icc_profile", "transparency")}
        if notes:
            rgb.info[_NOTES] = notes
        return rgb
    finally:
        if image is not source:
            image.close()
