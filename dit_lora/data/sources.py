"""Find training samples (image + caption) and weed out the unreadable ones.

Two passes, kept apart so the trainer can report data problems before it loads a model:

* :func:`load_samples` lists files and reads captions. It never decodes an image, so it is cheap
  and every caption problem surfaces at once, as one :class:`UserError`.
* :func:`~dit_lora.data.validation.validate_samples` decodes every image once and drops (and names)
  the broken ones, so a corrupt file found at step 40,000 cannot kill a run.
"""

from __future__ import annotations

import csv
import dataclasses
import hashlib
import json
import os
import posixpath
import struct
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Callable, ClassVar, Iterable, Iterator

from PIL import Image

from dit_lora.config.parser import check_one_source
from dit_lora.errors import UserError

from .decode import load_rgb
from .paths import locate, printable

if TYPE_CHECKING:
    from .hub_datasets import DatasetImages

IMAGE_EXTENSIONS = frozenset({".png", ".jpg", ".jpeg", ".webp", ".bmp", ".gif", ".tif", ".tiff"})
METADATA_FILENAMES = ("metadata.jsonl", "metadata.csv")
# Column names people commonly use for captions; only used to suggest a --caption_column value.
_CAPTION_GUESSES = ("text", "caption", "captions", "prompt", "description", "sentence", "label")
MAX_LOGGED_BAD = 20
MAX_NAMED = 5


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
    #: an image has no (frames, height, width) bucket; a clip (:class:`~dit_lora.data.video.VideoSample`) has one
    bucket: ClassVar[None] = None

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
        """sha256 hex digest of the encoded image bytes plus the caption.

        Stable across renames and machines, so caches keyed on it survive moving the data. For a
        dataset cell that only holds a decoded image, the raw pixels (with mode and size) are hashed.
        """
        digest = hashlib.sha256()
        source = self.source()
        if isinstance(source, Image.Image):
            payload = f"{source.mode}:{source.size[0]}x{source.size[1]}:".encode() + source.tobytes()
            _update_prefixed(digest, [payload])
        elif isinstance(source, (bytes, bytearray)):
            _update_prefixed(digest, [bytes(source)])
        else:
            with open(source, "rb") as handle:
                size = os.fstat(handle.fileno()).st_size
                digest.update(struct.pack("<Q", size))
                for chunk in iter(lambda: handle.read(1 << 20), b""):
                    digest.update(chunk)
        _update_prefixed(digest, [self.caption.encode("utf-8")])
        return digest.hexdigest()

    def cache_key(self) -> str:
        """What names this sample's latent-cache entry: for an image, exactly its :meth:`content_id`."""
        return self.content_id()

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
        value = self._images.raw(self._row)
        if isinstance(value, dict):
            if value.get("bytes"):
                return bytes(value["bytes"])
            if value.get("path"):
                return self._images.resolve(value["path"])
            raise ValueError("the image cell is empty")
        if isinstance(value, str):
            return self._images.string_path(self._row, value)
        if isinstance(value, Image.Image):
            return value
        if value is None:
            raise ValueError("the image cell is empty")
        raise TypeError(f"the image cell holds a {type(value).__name__}, not an image")


def _update_prefixed(digest: Any, parts: Iterable[bytes]) -> None:
    # Length prefixes keep (image, caption) pairs unambiguous: no bytes can migrate between them.
    for part in parts:
        digest.update(struct.pack("<Q", len(part)))
        digest.update(part)


# ---------------------------------------------------------------------------------------------
# load_samples
# ---------------------------------------------------------------------------------------------


def load_samples(
    *,
    train_data_dir: str | os.PathLike | None = None,
    dataset_name: str | None = None,
    dataset_config_name: str | None = None,
    image_column: str = "image",
    caption_column: str = "text",
    max_train_samples: int | None = None,
    cache_dir: str | None = None,
    labels_from_folders: bool = False,
) -> list[RawSample]:
    """List the training samples of a local folder or a `datasets` dataset, without decoding images.

    Folders follow the `datasets` imagefolder convention: ``metadata.jsonl`` / ``metadata.csv``
    (root or any subfolder, ``file_name`` relative to the metadata file) with a caption column, or
    a ``.txt`` caption beside each image. Metadata wins over ``.txt`` for the images it lists; a
    metadata row whose image is missing is kept so :func:`validate_samples` reports it by name.
    Order is sorted by key, so it is identical on every machine; ``max_train_samples`` keeps the
    first N of that order.

    Class labels (``labels_from_folders``, for class-conditional models): a folder without any
    metadata file is read in the imagefolder-by-class layout, ``root/<class>/<image>``, and each
    image's caption is the name of its first-level sub-folder (``.txt`` files are ignored then).
    With metadata, the caption column holds the class names as usual. A `datasets` caption column
    of type ``ClassLabel`` (e.g. ``label``) is always mapped from ints to the class names.

    Raises:
        UserError: both or neither source given, missing/empty folder, unreadable metadata, a
            missing caption/image column, images without any caption, or a dataset that fails to load.
    """
    check_one_source(train_data_dir, dataset_name, "images with captions")
    if max_train_samples is not None and (
        isinstance(max_train_samples, bool) or not isinstance(max_train_samples, int) or max_train_samples < 1
    ):
        raise UserError(
            f"--max_train_samples must be a positive whole number, got {max_train_samples!r}. "
            f"Leave it unset to train on every sample."
        )
    if train_data_dir is not None:
        samples = _load_folder(os.fspath(train_data_dir), caption_column, labels_from_folders)
    else:
        from .hub_datasets import load_dataset_samples  # imports this module: imported on use

        samples = load_dataset_samples(
            dataset_name, dataset_config_name, image_column, caption_column, max_train_samples, cache_dir
        )
    if max_train_samples is not None:
        samples = samples[:max_train_samples]
    return [dataclasses.replace(s, index=i) for i, s in enumerate(samples)]


def is_hidden(name: str) -> bool:
    # Same rule as `datasets`: skips .ipynb_checkpoints, .DS_Store, __MACOSX and friends.
    return name.startswith(".") or name.startswith("__")


def _walk_folder(root: str) -> tuple[list[str], set[str], list[tuple[str, str]]]:
    """Images, .txt captions and metadata files under ``root`` (keys relative to it, "/"-separated)."""
    images: list[str] = []
    texts: set[str] = set()
    metadata_files: list[tuple[str, str]] = []  # (folder relative to root, file name)
    seen_dirs: set[str] = set()
    for dirpath, dirnames, filenames in os.walk(root, followlinks=True):
        # Following symlinks is what users expect of a linked-in data folder; remembering real
        # paths stops a link cycle from walking forever.
        real = os.path.realpath(dirpath)
        if real in seen_dirs:
            dirnames[:] = []
            continue
        seen_dirs.add(real)
        dirnames[:] = sorted(d for d in dirnames if not is_hidden(d))
        rel_dir = os.path.relpath(dirpath, root).replace(os.sep, "/")
        rel_dir = "" if rel_dir == "." else rel_dir
        present = [m for m in METADATA_FILENAMES if m in filenames]
        if len(present) > 1:
            where = os.path.join(dirpath, "")
            raise UserError(
                f"{where} holds both metadata.jsonl and metadata.csv, so it is unclear which "
                f"captions to use. Delete or rename one of them (see --train_data_dir)."
            )
        metadata_files.extend((rel_dir, m) for m in present)
        for name in sorted(filenames):
            if is_hidden(name):
                continue
            rel = posixpath.join(rel_dir, name) if rel_dir else name
            ext = os.path.splitext(name)[1].lower()
            if ext in IMAGE_EXTENSIONS:
                images.append(rel)
            elif ext == ".txt":
                texts.add(rel)
    return images, texts, metadata_files


def _metadata_captions(root: str, metadata_files: list[tuple[str, str]],
                       caption_column: str, refused: list[RawSample]) -> dict[str, tuple[int, list[str | None]]]:
    """Captions per image key from every metadata file; ``refused`` gets one sample per row whose
    file_name leaves the data folder (:func:`~dit_lora.data.paths.locate`), each with its own line's reason."""
    # key -> (depth of the metadata file, [captions]); the deepest metadata file naming an image
    # wins, mirroring how a subfolder's own metadata is the more specific statement.
    from_metadata: dict[str, tuple[int, list[str | None]]] = {}
    for rel_dir, name in metadata_files:
        depth = rel_dir.count("/") + 1 if rel_dir else 0
        for key, caption, refusal in read_metadata(root, rel_dir, name, caption_column):
            if refusal is not None:
                # Per row, not per key: two rows reaching the same outside file are two findings, each with its line.
                refused.append(RawSample(key=key, caption=caption or "", refused=refusal))
                continue
            best = from_metadata.get(key)
            if best is None or depth > best[0]:
                from_metadata[key] = (depth, [caption])
            elif depth == best[0]:
                best[1].append(caption)  # several rows for one image: several captions
    return from_metadata


def _load_folder(root: str, caption_column: str, labels_from_folders: bool = False) -> list[RawSample]:
    if not os.path.exists(root):
        raise UserError(
            f"--train_data_dir {root!r} does not exist. Pass the folder that holds your training "
            f"images (absolute, or relative to {os.getcwd()!r})."
        )
    if not os.path.isdir(root):
        raise UserError(
            f"--train_data_dir {root!r} is a file, not a folder. Pass the folder that contains the "
            f"images and their metadata.jsonl or .txt captions."
        )

    images, texts, metadata_files = _walk_folder(root)
    refused: list[RawSample] = []  # outside the folder: kept (screening quarantines them), never opened
    from_metadata = _metadata_captions(root, metadata_files, caption_column, refused)
    if not images and not from_metadata and not refused:
        raise UserError(
            f"--train_data_dir {root!r} contains no images (looked for "
            f"{', '.join(sorted(IMAGE_EXTENSIONS))} in it and its subfolders, case-insensitive). "
            f"Point --train_data_dir at the folder that holds the images."
        )
    if labels_from_folders and not metadata_files:
        return _class_folder_samples(root, images)

    samples: list[RawSample] = list(refused)
    uncaptioned: list[str] = []
    # Absolute paths keep samples valid if the working directory changes (workers, notebooks).
    abs_root = os.path.abspath(root)
    for key in sorted(set(images) | set(from_metadata)):
        path = os.path.normpath(os.path.join(abs_root, *key.split("/")))
        txt = posixpath.splitext(key)[0] + ".txt"
        captions = from_metadata[key][1] if key in from_metadata else [None]
        if txt in texts and any(c is None for c in captions):
            # Metadata wins, but a row with an empty caption cell falls back to the .txt beside it.
            fallback = _read_txt(os.path.join(root, *txt.split("/")))
            captions = [fallback if c is None else c for c in captions]
        for caption in captions:
            if caption is None:
                uncaptioned.append(key)
            else:
                samples.append(RawSample(key=key, caption=caption, path=path))
    if uncaptioned:
        named = name_some(uncaptioned)
        raise UserError(
            f"{len(uncaptioned)} image(s) in --train_data_dir {root!r} have no caption: {named}. "
            f"Add a metadata.jsonl beside them with one line per image, e.g. "
            f'{{"file_name": "0001.png", "{caption_column}": "a photo of ..."}}, '
            f"or put a .txt file with the same name next to each image (0001.png -> 0001.txt)."
        )
    return sorted(samples, key=lambda s: s.key)  # refused rows among the others; stable: row order kept


def class_folder_names(root: str | None) -> list[str] | None:
    """The class names of an imagefolder-by-class ``root`` (sorted sub-folders holding an image), read without
    walking every image; None when ``root`` is not such a folder (missing, or labelled by a metadata file)."""
    if not root or not os.path.isdir(root) or any(os.path.isfile(os.path.join(root, m)) for m in METADATA_FILENAMES):
        return None
    def has_image(folder: str) -> bool:  # stops at the first image, at any depth
        return any(os.path.splitext(f)[1].lower() in IMAGE_EXTENSIONS for _, _, files in os.walk(folder) for f in files)

    names = [e.name for e in sorted(os.scandir(root), key=lambda e: e.name)
             if e.is_dir() and not e.name.startswith(".") and has_image(e.path)]
    return names or None


def _class_folder_samples(root: str, images: list[str]) -> list[RawSample]:
    """Samples of the imagefolder-by-class layout: the caption is the image's first-level folder name."""
    top_level = [key for key in images if "/" not in key]
    if top_level:
        named = name_some(top_level)
        raise UserError(
            f"{len(top_level)} image(s) lie directly in --train_data_dir {root!r}, outside any class folder: "
            f"{named}. Class labels are read from sub-folder names (root/<class>/<image>); move them "
            f"into the folder of their class, or add a metadata.jsonl with a class column (--caption_column)."
        )
    abs_root = os.path.abspath(root)
    return [
        RawSample(key=key, caption=key.split("/", 1)[0], path=os.path.normpath(os.path.join(abs_root, *key.split("/"))))
        for key in sorted(images)
    ]


def caption_value(value: Any) -> str | None:
    """A caption cell as text (the first of a list), or None when empty."""
    if value is None:
        return None
    if isinstance(value, (list, tuple)):
        # Datasets with several captions per image: use the first so training is deterministic.
        return caption_value(value[0]) if value else None
    return str(value).strip()


def _read_txt(path: str) -> str:
    try:
        with open(path, encoding="utf-8-sig") as handle:
            return handle.read().strip()
    except UnicodeDecodeError as err:
        raise UserError(
            f"Caption file {path!r} is not valid UTF-8 (byte {err.start}). Re-save it as UTF-8 text "
            f"(see --train_data_dir)."
        ) from None


def json_lines(lines: Iterable[str], bad_line: Callable[[int, json.JSONDecodeError], str]) -> Iterator[tuple[int, Any]]:
    """``(line number, value)`` of each non-blank JSON line; a line that does not parse stops with
    ``UserError(bad_line(line number, error))`` (the caller's paragraph names its file and format)."""
    for line_no, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            value = json.loads(line)
        except json.JSONDecodeError as err:
            raise UserError(bad_line(line_no, err)) from None
        yield line_no, value


def read_metadata(root: str, rel_dir: str, name: str,
                  caption_column: str) -> list[tuple[str, str | None, str | None]]:
    """Rows of one metadata file as (key relative to root, caption or None, refusal or None).

    A ``file_name`` that leaves ``root`` (``..``, or an absolute path outside it) keeps the row with the
    reason it is refused (:func:`~dit_lora.data.paths.locate`); an absolute one inside ``root`` gets its
    relative key.
    """
    path = os.path.join(root, *(rel_dir.split("/") if rel_dir else []), name)
    rows: list[tuple[int, dict]] = []
    columns: dict[str, None] = {}  # ordered set
    try:
        with open(path, encoding="utf-8-sig", newline="") as handle:
            if name.endswith(".jsonl"):
                bad_line = lambda no, err: (  # noqa: E731
                    f"{path} line {no} is not valid JSON ({err.msg}). Each line of metadata.jsonl must be one "
                    f'object such as {{"file_name": "0001.png", "{caption_column}": "a photo of ..."}}.'
                )
                for line_no, row in json_lines(handle, bad_line):
                    if not isinstance(row, dict):
                        raise UserError(
                            f"{path} line {line_no} is a JSON {type(row).__name__}, not an object. "
                            f'Write one object per line, e.g. {{"file_name": "0001.png", '
                            f'"{caption_column}": "a photo of ..."}}.'
                        )
                    rows.append((line_no, row))
                    columns.update(dict.fromkeys(row))
            else:
                reader = csv.DictReader(handle)
                columns.update(dict.fromkeys(reader.fieldnames or []))
                for row in reader:  # line_num: the file's own line (blank lines and multi-line cells counted)
                    rows.append((reader.line_num, row))
    except UnicodeDecodeError as err:
        raise UserError(f"{path} is not valid UTF-8 (byte {err.start}). Re-save it as UTF-8.") from None
    if not rows:
        return []
    listed = ", ".join(repr(c) for c in columns)
    if "file_name" not in columns:
        raise UserError(
            f"{path} has no 'file_name' column (columns: {listed}). Each row must name its image "
            f"in 'file_name', relative to the folder holding the metadata file."
        )
    if caption_column not in columns:
        raise UserError(
            f"{path} has no {caption_column!r} caption column (columns: {listed}). Pass "
            f"--caption_column with the column that holds the captions"
            f"{suggest_caption_column(columns, exclude='file_name')}, or rename that column to {caption_column!r}."
        )
    out = []
    for line_no, row in rows:
        file_name = row.get("file_name")
        if not isinstance(file_name, str) or not file_name.strip():
            raise UserError(
                f"{path} row at line {line_no} has an empty or non-text 'file_name' ({file_name!r}). "
                f"Give every row the image's file name relative to that folder."
            )
        shown = posixpath.join(rel_dir, name) if rel_dir else name
        located = locate(root, file_name, rel_dir=rel_dir, field=f"{shown} line {line_no}: file_name")
        # A refused row is named by its file_name as written (escaped), so the row can be found in the file.
        key = located.key if located.refused is None else printable(file_name)
        out.append((key, caption_value(row.get(caption_column)), located.refused))
    return out


def suggest_caption_column(columns: Iterable[str], exclude: str) -> str:
    """`` (probably --caption_column NAME)`` for a column named like a caption column, else ``""``."""
    names = [c for c in columns if c != exclude]
    for guess in _CAPTION_GUESSES:
        for name in names:
            if name.lower() == guess:
                return f" (probably --caption_column {name})"
    return ""
