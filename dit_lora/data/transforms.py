"""Deterministic image preprocessing: resize, crop, flip, scale to [-1, 1].

Matches the torchvision pipeline the diffusers example scripts use
(``Resize(BILINEAR) -> CenterCrop/RandomCrop -> RandomHorizontalFlip -> ToTensor -> Normalize(0.5, 0.5)``)
without depending on torchvision, and with every random choice derived from
``(seed, sample)`` instead of global RNG state. That makes a resumed run see the same crops and
flips as an uninterrupted one, no matter how many dataloader workers there are or in what order
they run, and lets latents be cached per (sample, crop).
"""

from __future__ import annotations

import hashlib
import random
from collections.abc import Sequence

import numpy as np
import torch
from PIL import Image

from dit_lora.core.errors import UserError

Resolution = int | Sequence[int]


def target_size(resolution: Resolution) -> tuple[int, int]:
    """Return (height, width) for an int or an (h, w) pair."""
    size: tuple[int, ...] | None
    if isinstance(resolution, bool):
        size = None
    elif isinstance(resolution, int):
        size = (resolution, resolution)
    else:
        try:
            size = tuple(int(v) for v in resolution)
        except (TypeError, ValueError):
            size = None
        if size is not None and (len(size) != 2 or any(int(v) != v for v in resolution)):
            size = None
    if size is None or min(size) < 1:
        raise UserError(
            f"--resolution must be a positive whole number (e.g. 512) or a height,width pair "
            f"(e.g. 512,768); got {resolution!r}."
        )
    return size[0], size[1]


def resized_size(width: int, height: int, resolution: Resolution) -> tuple[int, int]:
    """(width, height) after the cover-resize :func:`preprocess_image` applies.

    For a square target this is exactly torchvision's ``Resize(int)``: the short side becomes the
    target and the long side ``int(target * long / short)`` (truncated, not rounded). For an
    (h, w) target, the side that needs the larger scale factor is set exactly and the other is
    scaled by the same factor (never below its target), so the crop always fits.
    """
    target_h, target_w = target_size(resolution)
    # Compare target_h/height >= target_w/width without floating point.
    if target_h * width >= target_w * height:
        return max(target_w, int(target_h * width / height)), target_h
    return target_w, max(target_h, int(target_w * height / width))


def crop_box(
    size: tuple[int, int], resolution: Resolution, *, center_crop: bool, crop_rng_seed: int
) -> tuple[int, int, int, int]:
    """The (left, top, right, bottom) crop applied to an image of resized ``size`` = (w, h).

    Exposed so callers can record crop offsets (SDXL-style conditioning, latent caches) without
    re-running the transform.
    """
    width, height = size
    target_h, target_w = target_size(resolution)
    if center_crop:
        # torchvision's CenterCrop rounding (round-half-to-even via Python's round).
        top = int(round((height - target_h) / 2.0))
        left = int(round((width - target_w) / 2.0))
    else:
        rng = random.Random(crop_rng_seed)
        top = rng.randint(0, height - target_h)
        left = rng.randint(0, width - target_w)
    return left, top, left + target_w, top + target_h


def fit_to_bucket(
    image: Image.Image, resolution: Resolution, *, center_crop: bool, flip: bool, crop_rng_seed: int
) -> Image.Image:
    """The geometry of :func:`preprocess_image`, any PIL mode (an image, or its loss mask in mode F): resized to
    cover ``resolution`` (bilinear), cropped to it (the centre, or the window ``crop_rng_seed`` draws) and mirrored
    with ``flip``; one function, so a mask lines up with its image by construction."""
    new_w, new_h = resized_size(image.width, image.height, resolution)
    if (new_w, new_h) != image.size:
        # Same call torchvision's Resize makes on PIL input (no reducing_gap), so pixels match it.
        image = image.resize((new_w, new_h), Image.Resampling.BILINEAR)
    box = crop_box(image.size, resolution, center_crop=center_crop, crop_rng_seed=crop_rng_seed)
    if box != (0, 0, image.width, image.height):
        image = image.crop(box)
    if flip:
        image = image.transpose(Image.Transpose.FLIP_LEFT_RIGHT)
    return image


def preprocess_image(
    image: Image.Image,
    resolution: Resolution,
    *,
    center_crop: bool,
    flip: bool,
    crop_rng_seed: int,
) -> torch.Tensor:
    """Resize (bilinear, cover), crop, optionally mirror, and scale an image to [-1, 1].

    Args:
        image: a PIL image; converted to RGB if it is not already.
        resolution: ``512`` for square output or ``(height, width)``.
        center_crop: take the centre; otherwise a random crop drawn from ``crop_rng_seed``.
        flip: mirror horizontally (decide with :func:`flip_decision`).
        crop_rng_seed: seeds the random crop only (see :func:`crop_seed`); ignored for centre crops.

    Returns:
        float32 tensor of shape (3, height, width) with values in [-1, 1].
    """
    if image.mode != "RGB":
        image = image.convert("RGB")
    image = fit_to_bucket(image, resolution, center_crop=center_crop, flip=flip, crop_rng_seed=crop_rng_seed)
    # np.array (not asarray) copies into a writable buffer, which torch.from_numpy requires.
    pixels = torch.from_numpy(np.array(image, dtype=np.uint8))
    return pixels.permute(2, 0, 1).to(torch.float32).div_(127.5).sub_(1.0).contiguous()


def _hash_int(*parts: object) -> int:
    text = "\x1f".join(str(p) for p in parts).encode("utf-8")
    return int.from_bytes(hashlib.blake2b(text, digest_size=8).digest(), "little")


def flip_decision(seed: int, epoch: int, index: int) -> bool:
    """Fair, reproducible coin for "flip sample ``index`` in ``epoch``" under run ``seed``.

    A pure hash, so it touches no RNG state and gives the same answer in any worker, after any
    resume, in any order.
    """
    return bool(_hash_int("flip", int(seed), int(epoch), int(index)) & 1)


def crop_seed(seed: int, key: str) -> int:
    """Seed for a sample's random crop: fixed per (run seed, sample key), the same every epoch.

    Keyed on the sample's key rather than its index so the crop survives re-ordering or removal
    of other samples, and constant across epochs so cached latents stay valid.
    """
    return _hash_int("crop", int(seed), key) & 0x7FFF_FFFF_FFFF_FFFF
