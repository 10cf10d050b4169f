"""One listed training image before any pixel work (:class:`RawSample`), and the small text helpers its listings
share (:func:`name_some`, :func:`caption_value`, :func:`suggest_caption_column`).

Below both listings, the folders' (:mod:`.sources`, which re-exports these names) and the Hub datasets'
(:mod:`.hub_datasets`), so neither imports the other's way round.
"""

from __future__ import annotations

import hashlib
import os
import struct
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any, Protocol

from PIL import Image

from dit_lora.data.decode import load_rgb

# Column names people commonly use for captions; only used to suggest a --caption_column value.
_CAPTION_GUESSES = ("text", "caption", "captions", "prompt", "description", "sentence", "label")
MAX_NAMED = 5


class DatasetImages(Protocol):
    """What a sample reads of the dataset column holding its image or mask: :class:`.hub_datasets.DatasetImages`
    (declared here, by the members read, so this module stays below the listing that builds the samples)."""

    def raw(self, row: int) -> Any:
        """The cell of ``row`` as the dataset stores it."""
        ...

    def resolve(self, path: str) -> str:
        """The file of an ``Image`` cell's path."""
        ...

    def string_path(self, row: int, value: str) -> str:
        """The file a path-string cell names."""
        ...


def name_some(items: list[str]) -> str:
    """``a, b, c, d, e and 3 more``: the first few names of a list for an error message."""
    more = f" and {len(items) - MAX_NAMED} more" if len(items) > MAX_NAMED else ""
    return ", ".join(items[:MAX_NAMED]) + more


@dataclass(frozen=True)
class RawSample:
    """One training example before any pixel work: where the image is and its caption.

    ``key`` is what humans see in logs: the image path relative to ``--train_data_dir`` (posix
    separators) or ``"<dataset_name>[<row>]"``. ``path`` is set for folder samples; dataset samples
    keep a private handle on the dataset row instead (excluded from equality and hashing).
    """

    key: str
    caption: str
    path: str | None = None
    index: int = 0
    _images: DatasetImages | None = field(default=None, repr=False, compare=False)
    _row: int = field(default=-1, repr=False, compare=False)
    #: why the file is never opened (its written path leaves the data folder, :mod:`.paths`), or None
    refused: str | None = None
    #: which copy of a repeated image this is (a kohya ``N_words/`` folder lists each image N times): 0 for the first;
    #: the copies share key, file, caption and so their cache entry, and differ in index (their flips)
    repeat: int = 0
    #: the (height, width) an image is resized to cover and cropped to: its aspect-ratio bucket, set when the image
    #: family screens it (:func:`~dit_lora.data.aspect.bucket_of`); None before (a clip's is (frames, height, width))
    bucket: tuple[int, int] | None = None
    #: the files of the images a sample is conditioned on besides its caption (an edit model's control images, named
    #: by a metadata column the family reads), absolute paths inside the data folder; hashed into :meth:`content_id`
    conditions: tuple[str, ...] = ()
    #: the file of its loss mask (``--masked_loss``, :mod:`.masks`), an absolute path inside the data folder; hashed
    #: into :meth:`content_id` (a changed mask is a new cache entry). None: no mask, or one of a dataset column
    mask: str | None = None
    #: the dataset column holding its mask (``--mask_column`` of ``--dataset_name``), read at ``_row``
    _masks: DatasetImages | None = field(default=None, repr=False, compare=False)
    #: which set of a dataset config (``--dataset_config``, :mod:`dit_lora.data.data_sets`) it belongs to: 0 without one
    data_set: int = 0

    @property
    def has_mask(self) -> bool:
        """Whether the sample carries a loss mask (a file, or a dataset cell)."""
        return self.mask is not None or self._masks is not None

    def mask_source(self) -> str | bytes | Image.Image:
        """The mask's file path, encoded bytes or decoded image (:meth:`source`'s forms).

        Raises:
            ValueError: the sample has no mask, or its cell is empty.
        """
        if self.mask is not None:
            return self.mask
        if self._masks is None:
            raise ValueError(f"sample {self.key!r} has no mask")
        return _cell_source(self._masks, self._row, "mask")

    def open_image(self, *, resolution: Any = None, max_pixels: int | None = None) -> Image.Image:
        """Decode the image and return it as RGB, rotated per its EXIF orientation.

        Transparent images are composited onto white rather than having alpha dropped, because the
        colour under fully transparent pixels is arbitrary (often black) and would be learned. With
        ``max_pixels`` an image beyond it is refused from its header (:class:`~dit_lora.data.decode.ImageTooLarge`);
        with ``resolution`` (the training size) a much larger image is decoded reduced
        (:func:`~dit_lora.data.decode.load_rgb`).
        """
        return load_rgb(self.source(), resolution=resolution, max_pixels=max_pixels)

    def content_id(self) -> str:
        """sha256 hex digest of the encoded image bytes plus the caption (plus the bytes of each of its
        :attr:`conditions`, when it has any: a changed control image is a new cache entry).

        Stable across renames and machines, so caches keyed on it survive moving the data. For a
        dataset cell that only holds a decoded image, the raw pixels (with mode and size) are hashed.
        """
        digest = hashlib.sha256()
        _update_source(digest, self.source())
        _update_prefixed(digest, [self.caption.encode("utf-8")])
        for condition in self.conditions:
            with open(condition, "rb") as handle:
                _update_file(digest, handle)
        if self.has_mask:  # only under --masked_loss (masks are attached then): unmasked entries keep their names
            _update_prefixed(digest, [b"loss mask"])
            _update_source(digest, self.mask_source())
        return digest.hexdigest()

    def cache_key(self) -> str:
        """What names this sample's latent-cache entry: its :meth:`content_id` plus its bucket, ``<sha256>:HxW``.

        Changing ``--resolution`` or ``--aspect_buckets`` thus re-encodes only the images whose bucket changed.
        An image not bucketed yet is named by its content id alone.
        """
        if self.bucket is None:
            return self.content_id()
        height, width = self.bucket
        return f"{self.content_id()}:{height}x{width}"

    def display_name(self) -> str:
        """How reports name this sample: its file, or its key when it is a dataset row."""
        return str(self.path) if self.path else self.key

    def source(self) -> str | bytes | Image.Image:
        """A file path, encoded bytes, or (rarely) an already decoded image."""
        if self.refused is not None:
            raise ValueError(self.refused)  # a refused file is never opened, whoever asks
        if self.path is not None:
            return self.path
        if self._images is None:
            raise ValueError(f"sample {self.key!r} has neither a file path nor a dataset row")
        return _cell_source(self._images, self._row, "image")


def _cell_source(images: DatasetImages, row: int, what: str) -> str | bytes | Image.Image:
    """A dataset cell (``what``: "image", "mask") as a file path, encoded bytes or a decoded image."""
    value = images.raw(row)
    if isinstance(value, dict):
        if value.get("bytes"):
            return bytes(value["bytes"])
        if value.get("path"):
            return images.resolve(value["path"])
        raise ValueError(f"the {what} cell is empty")
    if isinstance(value, str):
        return images.string_path(row, value)
    if isinstance(value, Image.Image):
        return value
    if value is None:
        raise ValueError(f"the {what} cell is empty")
    raise TypeError(f"the {what} cell holds a {type(value).__name__}, not an image")


def _update_source(digest: Any, source: str | bytes | Image.Image) -> None:
    """A file's, encoded bytes' or decoded image's content into ``digest`` (a decoded image: mode, size, pixels)."""
    if isinstance(source, Image.Image):
        payload = f"{source.mode}:{source.size[0]}x{source.size[1]}:".encode() + source.tobytes()
        _update_prefixed(digest, [payload])
    elif isinstance(source, (bytes, bytearray)):
        _update_prefixed(digest, [bytes(source)])
    else:
        with open(source, "rb") as handle:
            _update_file(digest, handle)


def _update_file(digest: Any, handle: Any) -> None:
    """A file's size, then its bytes, in 1 MiB reads (the size prefix keeps neighbouring parts apart)."""
    digest.update(struct.pack("<Q", os.fstat(handle.fileno()).st_size))
    for chunk in iter(lambda: handle.read(1 << 20), b""):
        digest.update(chunk)


def _update_prefixed(digest: Any, parts: Iterable[bytes]) -> None:
    # Length prefixes keep (image, caption) pairs unambiguous: no bytes can migrate between them.
    for part in parts:
        digest.update(struct.pack("<Q", len(part)))
        digest.update(part)


def caption_value(value: Any) -> str | None:
    """A caption cell as text (the first of a list), or None when empty."""
    if value is None:
        return None
    if isinstance(value, (list, tuple)):
        # Datasets with several captions per image: use the first so training is deterministic.
        return caption_value(value[0]) if value else None
    return str(value).strip()


def suggest_caption_column(columns: Iterable[str], exclude: str) -> str:
    """`` (probably --caption_column NAME)`` for a column named like a caption column, else ``""``."""
    names = [c for c in columns if c != exclude]
    for guess in _CAPTION_GUESSES:
        for name in names:
            if name.lower() == guess:
                return f" (probably --caption_column {name})"
    return ""
