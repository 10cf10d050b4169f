"""Loss masks (``--masked_loss``): which file is a sample's mask, how it is read, and how it follows its image.

A mask is a picture of its image's shape whose brightness weights the loss: white trains, black is ignored (weighted
``--unmasked_weight``), grey weights in between (the convention of OneTrainer, ai-toolkit, kohya's sd-scripts and
SimpleTuner). A sample's mask is, in this order:

* the metadata column ``--mask_column`` (default ``mask``) of its ``metadata.jsonl`` / ``metadata.csv`` row: a path
  relative to the metadata file's folder, as ``file_name`` is (refused when it leaves the data folder);
* ``<stem>_mask.<ext>`` beside the image (any image extension; also OneTrainer's ``<stem>-masklabel.png``), in a
  kohya ``N_words/`` folder as anywhere else;
* for ``--dataset_name``, the cell of the dataset's ``--mask_column`` column (an image, or a path string).

Such files are never training images of their own (:func:`masks_beside`, and the column's files are excluded from the
listing). The value of a pixel, any Pillow mode: its luminance (Pillow's ``L``: ITU-R 601-2) times its alpha when the
file has transparency (a transparent pixel is black: only what is painted trains); ``1``-bit masks are 0 or 1;
16-bit and float greyscale are scaled as images are (:mod:`.decode`). A coloured mask trains by its luminance (said).

The mask follows its image exactly: its EXIF orientation, then (when its size differs from the image's, with the same
aspect ratio) a resize to the image's size, then the image's own cover-resize (bilinear), crop window and flip
(:func:`preprocess_mask`, in floats: no rounding). The latent cache stores it averaged over each latent pixel's area
(:func:`latent_mask`), so a grey or anti-aliased edge is a fractional weight; the loss multiplies each latent pixel's
squared error by ``max(mask, --unmasked_weight)`` (:mod:`dit_lora.modeling.masked_loss`).
"""

from __future__ import annotations

import csv
import dataclasses
import json
import os
import posixpath
from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np
import torch
from PIL import Image, ImageOps

from dit_lora.core.errors import UserError
from dit_lora.data.decode import _deep_to_grey, _is_deep, open_checked, oriented_size
from dit_lora.data.kohya import copy_of
from dit_lora.data.paths import Located, locate
from dit_lora.data.samples import RawSample, name_some
from dit_lora.data.transforms import Resolution, fit_to_bucket
from dit_lora.modeling.masked_loss import MASK_KEY

if TYPE_CHECKING:
    from dit_lora.config.schema import DataOptions

#: the metadata (and dataset) column naming a sample's mask, unless ``--mask_column`` names another
MASK_COLUMN = "mask"
#: the file-name endings of a mask beside its image: this project's ``<stem>_mask``, OneTrainer's ``-masklabel``
SUFFIXES = ("_mask", "-masklabel")
#: the cache's (and the batch's) name of the latent-grid mask, ``(1, h, w)`` per sample in [0, 1]
LATENT_KEY = MASK_KEY
#: the uncached batch's name of the pixel mask, ``(1, H, W)`` per sample (:class:`~dit_lora.data.batches.RawImageDataset`)
PIXEL_KEY = "mask_pixels"
#: modes whose channels are no brightness a person paints: their luminance is used, and said
_COLOUR_SPACES = ("CMYK", "YCbCr", "LAB", "HSV")
_IMAGE_EXTENSIONS = frozenset({".png", ".jpg", ".jpeg", ".webp", ".bmp", ".gif", ".tif", ".tiff"})


# ---- which file is a mask -------------------------------------------------------------------------------------------


def masks_beside(keys: Iterable[str]) -> dict[str, str]:
    """``{image key: mask key}`` for the images of ``keys`` (folder keys, "/"-separated) with a mask file among
    ``keys`` beside them: ``<stem><suffix>.<image ext>`` (:data:`SUFFIXES`), in the image's folder. A ``.png`` mask
    wins over another extension, this project's suffix over OneTrainer's."""
    keys = list(keys)
    by_stem: dict[str, list[str]] = {}
    for key in keys:
        by_stem.setdefault(posixpath.splitext(key)[0], []).append(key)
    found: dict[str, tuple[tuple[int, int], str]] = {}
    for key in keys:
        stem, ext = posixpath.splitext(key)
        if ext.lower() not in _IMAGE_EXTENSIONS:
            continue
        for rank, suffix in enumerate(SUFFIXES):
            if not stem.endswith(suffix) or posixpath.basename(stem) == suffix:
                continue
            for image in by_stem.get(stem[: -len(suffix)], ()):
                order = (rank, 0 if ext.lower() == ".png" else 1)
                if image not in found or order < found[image][0]:
                    found[image] = (order, key)
    mask_keys = {mask for _, mask in found.values()}
    return {image: mask for image, (_, mask) in found.items() if image not in mask_keys}


def _metadata_rows(path: str) -> list[tuple[int, dict]]:
    """``(line, row)`` of one metadata file; a file that does not parse gives none here (the caption reader, which
    reads it next, names the problem in its own paragraph)."""
    try:
        return _parse_rows(path)
    except (UnicodeDecodeError, csv.Error):
        return []


def _parse_rows(path: str) -> list[tuple[int, dict]]:
    with open(path, encoding="utf-8-sig", newline="") as handle:
        if path.endswith(".jsonl"):
            rows = []
            for number, line in enumerate(handle, 1):
                if line.strip():
                    try:
                        value = json.loads(line)
                    except json.JSONDecodeError:
                        continue  # the caption reader names the line
                    if isinstance(value, dict):
                        rows.append((number, value))
            return rows
        reader = csv.DictReader(handle)
        return [(reader.line_num, row) for row in reader]


def metadata_masks(root: str, metadata_files: Iterable[tuple[str, str]], column: str) -> dict[str, Located]:
    """``{image key: the mask its row names}`` from the ``column`` of every metadata file (``(folder relative to
    root, file name)``); a path leaving ``root`` keeps the reason it is refused (:func:`~dit_lora.data.paths.locate`)."""
    out: dict[str, Located] = {}
    for rel_dir, name in metadata_files:
        shown = f"{rel_dir}/{name}" if rel_dir else name
        for line, row in _metadata_rows(os.path.join(root, *(rel_dir.split("/") if rel_dir else []), name)):
            value, file_name = row.get(column), row.get("file_name")
            if not isinstance(file_name, str) or not isinstance(value, str) or not value.strip():
                continue
            key = locate(root, file_name, rel_dir=rel_dir).key
            out.setdefault(key, locate(root, value, rel_dir=rel_dir, field=f"{shown} line {line}: {column}"))
    return out


@dataclass
class FolderMasks:
    """The loss masks of a folder: ``of`` (image key -> mask path, or the reason a column's path is refused) and
    ``files`` (the keys of the mask files: no samples of their own)."""

    root: str
    of: dict[str, Located]
    files: frozenset[str]
    column: str = MASK_COLUMN

    def report(self, log, *, attached: bool) -> None:
        """One line when the folder holds masks that this run does not read (``--masked_loss`` off)."""
        if self.files and not attached:
            log(
                f"{len(self.files)} mask file(s) (`<name>_mask.png` beside an image, or named by the `{self.column}` "
                "metadata column) are no training images of their own; --masked_loss weights the loss with them"
            )

    def attach(self, samples: list[RawSample]) -> list[RawSample]:
        """``samples`` each with its mask path (those without one unchanged).

        Raises:
            UserError: a metadata row's mask path leaves the data folder.
        """
        refused = [(k, m.refused) for k, m in self.of.items() if m.refused is not None]
        if refused:
            raise UserError(
                f"The mask of `{refused[0][0]}` is refused: {refused[0][1]}. Name a file inside --train_data_dir "
                f"{self.root!r} in the `{self.column}` column (relative to the metadata file's folder, as file_name)."
            )
        return [
            dataclasses.replace(s, mask=self.of[s.key].path) if s.key in self.of and s.refused is None else s
            for s in samples
        ]


def folder_masks(root: str, images: list[str], metadata_files: list[tuple[str, str]], column: str) -> FolderMasks:
    """The masks of a folder's ``images`` (keys): the ``column`` of its metadata files first, then the files beside
    them (:func:`masks_beside`)."""
    abs_root = os.path.abspath(root)
    named = metadata_masks(root, metadata_files, column) if metadata_files else {}
    beside = masks_beside(images)
    of = {
        image: Located(mask, os.path.normpath(os.path.join(abs_root, *mask.split("/"))), None)
        for image, mask in beside.items()
    }
    of.update(named)
    files = set(beside.values()) | {m.key for m in named.values() if m.refused is None}
    return FolderMasks(root, of, frozenset(files), column)


# ---- reading and following the image ---------------------------------------------------------------------------------


@dataclass
class MaskValues:
    """A decoded mask: ``values`` (float32 ``(H, W)`` in [0, 1], upright), and what to say about its mode."""

    values: np.ndarray
    notes: list[str] = field(default_factory=list)


def read_mask(source: str | bytes | Image.Image, max_pixels: int | None = None) -> MaskValues:
    """Decode a mask file (any Pillow mode, by the rules of the module docstring), turned upright per its EXIF.

    Raises:
        OSError, ValueError: unreadable, beyond ``max_pixels``, or a deep mode of unknown scale (:mod:`.decode`).
    """
    image = open_checked(source, max_pixels)
    try:
        image.load()
        upright = ImageOps.exif_transpose(image) or image
        return _values(upright)
    finally:
        if image is not source:
            image.close()


def _values(image: Image.Image) -> MaskValues:
    notes: list[str] = []
    if _is_deep(image.mode):
        image = _deep_to_grey(image)  # 16-bit, 32-bit, float greyscale as 8-bit (LA with a transparent value)
    if image.mode == "1":
        return MaskValues(np.asarray(image, dtype=np.float32))
    if image.mode == "L":
        return MaskValues(np.asarray(image, dtype=np.float32) / 255.0)
    if image.mode in _COLOUR_SPACES:
        notes.append(f"mode {image.mode}: its luminance is the weight")
    transparent = "A" in image.mode or "a" in image.mode or "transparency" in image.info
    rgba = image.convert("RGBA")
    rgb = np.asarray(rgba.convert("RGB"))
    if image.mode not in _COLOUR_SPACES and not (
        (rgb[..., 0] == rgb[..., 1]).all() and (rgb[..., 1] == rgb[..., 2]).all()
    ):
        notes.append(f"coloured ({image.mode}): its luminance is the weight, as if it were greyscale")
    values = np.asarray(rgba.convert("RGB").convert("L"), dtype=np.float32) / 255.0
    if transparent:
        values = values * (np.asarray(rgba.getchannel("A"), dtype=np.float32) / 255.0)
    return MaskValues(values, notes)


def same_shape(mask_size: tuple[int, int], image_size: tuple[int, int]) -> bool:
    """Whether a mask of ``mask_size`` (w, h) has the aspect ratio of an image of ``image_size`` (w, h), to a pixel."""
    (mw, mh), (iw, ih) = mask_size, image_size
    return abs(mw * ih - mh * iw) <= max(mw, mh, iw, ih)


def preprocess_mask(
    values: np.ndarray,
    image_size: tuple[int, int],
    resolution: Resolution,
    *,
    center_crop: bool,
    flip: bool,
    crop_rng_seed: int,
) -> torch.Tensor:
    """A mask (``(H, W)`` floats) through its image's preprocessing: resized to ``image_size`` (the image as decoded,
    (w, h)) when it differs, then :func:`~dit_lora.data.transforms.preprocess_image`'s cover-resize (bilinear), crop
    window (the same ``crop_rng_seed``) and flip; float32 ``(1, height, width)`` in [0, 1]."""
    mask = Image.fromarray(np.ascontiguousarray(values, dtype=np.float32))  # mode F: bilinear without rounding
    if mask.size != (image_size[0], image_size[1]):
        mask = mask.resize((image_size[0], image_size[1]), Image.Resampling.BILINEAR)
    mask = fit_to_bucket(mask, resolution, center_crop=center_crop, flip=flip, crop_rng_seed=crop_rng_seed)
    return torch.from_numpy(np.array(mask, dtype=np.float32)).clamp_(0.0, 1.0)[None]


def sample_mask(
    sample: RawSample,
    image_size: tuple[int, int],
    resolution: Resolution,
    *,
    center_crop: bool,
    flip: bool,
    crop_rng_seed: int,
    max_pixels: int | None = None,
) -> torch.Tensor:
    """``sample``'s mask read (:func:`read_mask`) and prepared as its image, decoded at ``image_size`` (w, h), is
    (:func:`preprocess_mask`): ``(1, height, width)``."""
    values = read_mask(sample.mask_source(), max_pixels).values
    return preprocess_mask(
        values, image_size, resolution, center_crop=center_crop, flip=flip, crop_rng_seed=crop_rng_seed
    )


def latent_mask(mask_pixels: torch.Tensor, latent_size: tuple[int, int] | torch.Size) -> torch.Tensor:
    """``(B, 1, H, W)`` pixel masks averaged over each latent pixel's area: ``(B, 1, h, w)`` float32 (the bucket sizes
    are multiples of the latent grid, so each latent pixel averages one whole block of pixels)."""
    return torch.nn.functional.adaptive_avg_pool2d(mask_pixels.float(), (int(latent_size[0]), int(latent_size[1])))


# ---- attaching, checking -----------------------------------------------------------------------------------------


#: where a sample's mask is looked for, as check-data's BLOCK row says it
LOOKED_FOR = "looked for `<name>_mask.png` beside it and the metadata's mask column"


def missing_masks_error(missing: list[str], total: int, where: str) -> UserError:
    """The one paragraph for ``--masked_loss`` with samples that have no mask (``where``: what was looked at)."""
    return UserError(
        f"--masked_loss weights each image's loss by its mask, but {len(missing)} of {total} image(s) have none: "
        f"{name_some(missing)}. Looked for {where}. Give each image a mask (white trains, black is ignored, grey "
        "weights in between; an all-white mask trains the whole image), or leave --masked_loss off."
    )


@dataclass
class MaskCheck:
    """What screening and ``check-data`` find in one sample's mask: ``blocks`` (the sample cannot train as asked),
    ``warns`` (it trains, differently than one might think), and whether it is ``white`` (no masking)."""

    blocks: list[str] = field(default_factory=list)
    warns: list[str] = field(default_factory=list)
    white: bool = False

    @property
    def status(self) -> str:
        """``block``, ``white``, ``warn`` or ``ok``: how the count line of ``check-data`` counts it."""
        return "block" if self.blocks else "white" if self.white else "warn" if self.warns else "ok"


def check_mask(sample: RawSample, *, unmasked_weight: float = 0.0, max_pixels: int | None = None) -> MaskCheck:
    """Read ``sample``'s mask as training will and say what is wrong with it: unreadable, not its image's aspect ratio
    (block); all black with ``unmasked_weight`` 0 (block: the sample would train nothing); another size (resized:
    warn), all white (no masking: warn), coloured or another colour space (its luminance: warn)."""
    found = MaskCheck()
    name = posixpath.basename(sample.mask) if sample.mask else "the mask cell"
    try:
        read = read_mask(sample.mask_source(), max_pixels)
        image_size = oriented_size(sample.source(), max_pixels)
    except Exception as err:
        found.blocks.append(f"mask {name} cannot be read ({type(err).__name__}: {' '.join(str(err).split())[:160]})")
        return found
    height, width = read.values.shape
    if not same_shape((width, height), image_size):
        found.blocks.append(
            f"mask {name} is {width}x{height}, not of its image's shape ({image_size[0]}x{image_size[1]}): it would "
            "not line up; save it at the image's size"
        )
        return found
    if (width, height) != tuple(image_size):
        found.warns.append(f"mask {name} is {width}x{height}: resized to its image's {image_size[0]}x{image_size[1]}")
    found.warns.extend(f"mask {name}: {note}" for note in read.notes)
    if not read.values.any():
        text = f"mask {name} is all black: the sample would train nothing"
        if unmasked_weight > 0:
            found.warns.append(
                f"mask {name} is all black: the whole image trains at --unmasked_weight {unmasked_weight}"
            )
        else:
            found.blocks.append(text)
    elif (read.values >= 1.0).all():
        found.white = True
        found.warns.append(f"mask {name} is all white: the whole image trains (no masking)")
    return found


def check_options(data: DataOptions, explicit: frozenset[str] | None) -> None:
    """``--unmasked_weight``, ``--normalize_masked_area_loss`` or ``--mask_column`` without ``--masked_loss`` would
    do nothing: one paragraph, before anything loads (``explicit``: the options the user set, ``cfg.explicit``)."""
    explicit = explicit or frozenset()
    given = [name for name in ("unmasked_weight", "normalize_masked_area_loss", "mask_column") if name in explicit]
    if given and not data.masked_loss:
        flags = " and ".join(f"--{name}" for name in given)
        raise UserError(
            f"{flags} shape{'s' if len(given) == 1 else ''} the masked loss, but --masked_loss is off, so "
            f"{'it' if len(given) == 1 else 'they'} would be ignored. Pass --masked_loss true (each image then needs a "
            f"mask: `<name>_mask.png` beside it or the `{data.mask_column}` metadata column), or remove {flags}."
        )


def require_masks(samples: list[RawSample], *, column: str, folder: str | None, dataset: str | None) -> None:
    """Every listed sample has a mask (``--masked_loss``), or one paragraph naming how many lack one and where."""
    files = [s for s, first in zip(samples, copy_of(samples)) if samples[first] is s and s.refused is None]
    missing = [s.key for s in files if not s.has_mask]
    if not missing:
        return
    where = (
        f"the `{column}` column of --dataset_name {dataset!r} (--mask_column)"
        if dataset
        else f"`<name>_mask.png` beside each image (or OneTrainer's `<name>-masklabel.png`) and the `{column}` column "
        f"of its metadata.jsonl/.csv row in --train_data_dir {folder!r} (--mask_column)"
    )
    raise missing_masks_error(missing, len(files), where)


def screen_masks(
    samples: list[RawSample],
    *,
    unmasked_weight: float,
    max_pixels: int | None,
    log: Callable[[str], Any],
    quarantine: list[dict[str, Any]],
) -> list[RawSample]:
    """The samples whose mask trains (each file's mask read once, in threads); the others are quarantined with the
    reason (:func:`check_mask`'s blocks). One line counts what training does with the rest (resized, all white,
    coloured)."""
    origin = copy_of(samples)
    firsts = [i for i, first in enumerate(origin) if first == i]
    with ThreadPoolExecutor(max_workers=max(1, min(8, os.cpu_count() or 1)), thread_name_prefix="masks") as pool:
        found = dict(
            zip(
                firsts,
                pool.map(
                    lambda s: check_mask(s, unmasked_weight=unmasked_weight, max_pixels=max_pixels),
                    [samples[i] for i in firsts],
                ),
            )
        )
    for i in firsts:
        if found[i].blocks:
            quarantine.append({"key": samples[i].key, "reason": "; ".join(found[i].blocks)})
            log(f"skipping {samples[i].key}: {'; '.join(found[i].blocks)}")
    checks = [found[i] for i in firsts if not found[i].blocks]
    resized = sum(any("resized" in w for w in c.warns) for c in checks)
    coloured = sum(any("luminance" in w for w in c.warns) for c in checks)
    white = sum(c.white for c in checks)
    log(
        f"masks (--masked_loss): {len(checks)} used, {len(firsts) - len(checks)} left out; {white} all white (no "
        f"masking), {resized} resized to their image's size, {coloured} coloured (their luminance weighs)"
    )
    kept = [s for s, first in zip(samples, origin) if not found[first].blocks]
    return [dataclasses.replace(s, index=i) for i, s in enumerate(kept)]  # renumbered, as screening leaves them
