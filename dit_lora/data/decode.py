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
"""

from __future__ import annotations

import io
import os
import re
import warnings

from PIL import Image, ImageOps

from .transforms import Resolution, resized_size, target_size

__all__ = ["ImageTooLarge", "decode_workers", "image_bytes", "load_rgb", "open_checked", "pixel_budget", "to_rgb",
           "too_large"]

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
_ORIENTATION = {2: Image.Transpose.FLIP_LEFT_RIGHT, 3: Image.Transpose.ROTATE_180, 4: Image.Transpose.FLIP_TOP_BOTTOM,
                5: Image.Transpose.TRANSPOSE, 6: Image.Transpose.ROTATE_270, 7: Image.Transpose.TRANSVERSE,
                8: Image.Transpose.ROTATE_90}


class ImageTooLarge(ValueError):
    """An image beyond the pixel budget; ``str(err)`` is the quarantine reason with the fix."""


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
        f"it, or raise --max_image_pixels (e.g. --max_image_pixels {pixels}) if it is meant to be used")


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
        raise ImageTooLarge(f"{pixels / 1e6:.0f} MP is beyond the pixel budget of {limit / 1e6:.0f} MP (refused "
                            f"before decoding: a small file can hold a huge image). Downscale it, or raise "
                            f"--max_image_pixels if it is meant to be used") from None
    if max_pixels and image.width * image.height > max_pixels:
        width, height = image.size
        image.close()
        raise too_large(width, height, max_pixels)
    return image


def _reduce_factor(image: Image.Image, resolution: Resolution, orientation: int) -> int:
    """How many times smaller ``image`` may be decoded and still be ``REDUCING_GAP`` times what the resize needs."""
    width, height = image.size
    swapped = orientation in (5, 6, 7, 8)
    need_w, need_h = resized_size(height, width, resolution) if swapped else resized_size(width, height, resolution)
    if swapped:
        need_w, need_h = need_h, need_w
    return max(1, min(width // (REDUCING_GAP * need_w), height // (REDUCING_GAP * need_h)))


def _has_alpha(image: Image.Image) -> bool:
    return image.mode in ("RGBA", "LA", "PA", "La", "RGBa") or "transparency" in image.info


def _reduced(image: Image.Image, factor: int) -> Image.Image:
    """``image`` box-reduced ``factor`` times as RGB or RGBA, converting one strip of rows at a time."""
    mode = "RGBA" if _has_alpha(image) else "RGB"
    width, height = image.size
    out = Image.new(mode, (-(-width // factor), -(-height // factor)))
    rows = max(factor, _STRIP_ROWS // factor * factor)  # strips start at multiples of the factor: exact blocks
    for top in range(0, height, rows):
        strip = image.crop((0, top, width, min(height, top + rows)))
        out.paste(strip.convert(mode).reduce(factor), (0, top // factor))
    return out


def to_rgb(image: Image.Image) -> Image.Image:
    """Always a new RGB image (so the caller may close the original); transparency is composited onto white,
    because the colour under fully transparent pixels is arbitrary (often black) and would be learned."""
    if image.mode == "P" or (image.mode in ("L", "RGB") and "transparency" in image.info):
        image = image.convert("RGBA")
    if image.mode in ("RGBA", "LA", "PA"):
        rgba = image.convert("RGBA")
        background = Image.new("RGBA", rgba.size, (255, 255, 255, 255))
        return Image.alpha_composite(background, rgba).convert("RGB")
    return image.convert("RGB")


def load_rgb(source: str | bytes | Image.Image, *, resolution: Resolution | None = None,
             max_pixels: int | None = None) -> Image.Image:
    """Decode ``source`` to RGB, rotated per its EXIF orientation, within ``max_pixels`` and reduced for
    ``resolution`` when it is much larger than training needs (see the module docstring).

    Without ``resolution`` the image is decoded at full size, as before; a source image is never closed,
    an image opened here always is.

    Raises:
        ImageTooLarge: beyond ``max_pixels``; Pillow's errors for unreadable, truncated or corrupt files.
    """
    image = open_checked(source, max_pixels)
    try:
        orientation = int(image.getexif().get(0x0112) or 1) if resolution is not None else 1
        factor = _reduce_factor(image, resolution, orientation) if resolution is not None else 1
        if factor > 1 and image.format == "JPEG" and image is not source:
            width, height = image.size
            image.draft(None, (width // factor, height // factor))  # the decoder itself scales by 1/2, 1/4, 1/8
        image.load()
        if factor > 1:
            factor = _reduce_factor(image, resolution, orientation)  # what the draft left to reduce
        if factor <= 1:
            return to_rgb(ImageOps.exif_transpose(image))
        reduced = _reduced(image, factor)
        if orientation in _ORIENTATION:
            reduced = reduced.transpose(_ORIENTATION[orientation])
        return to_rgb(reduced)
    finally:
        if image is not source:
            image.close()
