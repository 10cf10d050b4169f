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
import json
import os
import posixpath
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any

from dit_lora.config.checks import check_one_source
from dit_lora.core.errors import UserError
from dit_lora.data import listing
from dit_lora.data.caption_files import NotUTF8, caption_refusal, decode_caption
from dit_lora.data.hub_datasets import load_dataset_samples
from dit_lora.data.kohya import (
    checked_caption_extension,
    checked_instance_prompt,
    refuse_caption_extension_for_dataset,
    repeat_folder_samples,
)
from dit_lora.data.kohya import kohya_folders as _kohya_folders
from dit_lora.data.masks import MASK_COLUMN, folder_masks
from dit_lora.data.paths import FolderWalk, is_hidden, locate, printable  # noqa: F401 (is_hidden: re-exported)
from dit_lora.data.samples import (  # noqa: F401 (re-exported: what a listed sample is, below the listings)
    MAX_NAMED,
    RawSample,
    caption_value,
    name_some,
    suggest_caption_column,
)

IMAGE_EXTENSIONS = frozenset({".png", ".jpg", ".jpeg", ".webp", ".bmp", ".gif", ".tif", ".tiff"})
METADATA_FILENAMES = ("metadata.jsonl", "metadata.csv")
MAX_LOGGED_BAD = 20
#: the sidecar caption extensions in common use: this project and musubi-tuner read ``.txt`` by default, kohya-ss'
#: sd-scripts ``.caption``; the one not chosen is looked for only to say that it is there
COMMON_CAPTION_EXTENSIONS = (".txt", ".caption")


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
    caption_extension: str = ".txt",
    instance_prompt: str | None = None,
    dataset_split: str = "train",
    log: Callable[[str], Any] | None = None,
    caption_column_given: bool = False,
    exclude_keys: frozenset[str] = frozenset(),
    mask_column: str = MASK_COLUMN,
    attach_masks: bool = False,
) -> list[RawSample]:
    """List the training samples of a local folder or a `datasets` dataset, without decoding images.

    Folders follow the `datasets` imagefolder convention: ``metadata.jsonl`` / ``metadata.csv``
    (root or any subfolder, ``file_name`` relative to the metadata file) with a caption column, or
    a sidecar caption beside each image (``caption_extension``: ``.txt``, or kohya's ``.caption``). Metadata wins
    over the sidecar for the images it lists; a metadata row whose image is missing is kept so
    :func:`validate_samples` reports it by name. Order is sorted by key, so it is identical on every machine;
    ``max_train_samples`` keeps the first N images of that order.

    kohya-ss folders: a first-level sub-folder named ``N_words`` (read as sd-scripts reads it: the text before the
    first ``_`` is N) lists each of its images N times per epoch (copies with ``repeat`` 1..N-1 right after the
    image, sharing its cache entry); an image in it without a caption takes ``words`` as its caption (kohya's class
    tokens). ``instance_prompt`` (diffusers' DreamBooth ``--instance_prompt``) captions every image with itself; for a
    dataset with ``caption_column_given`` (``--caption_column`` set explicitly) it captions only the rows whose
    caption is empty, as diffusers' ``DreamBoothDataset`` does.
    What was repeated or captioned so is said through ``log`` (default: print, on the main process only).
    ``exclude_keys`` (folder keys) are files of the folder that are no samples of their own (an edit model's
    control images, which the samples' metadata rows name). Loss masks (:mod:`.masks`: ``<stem>_mask.png`` beside an
    image, or a file the metadata's ``mask_column`` names) are never samples; with ``attach_masks`` (``--masked_loss``)
    each sample carries its mask (``RawSample.mask``; a dataset's ``mask_column`` cell).

    Class labels (``labels_from_folders``, for class-conditional models): a folder without any
    metadata file is read in the imagefolder-by-class layout, ``root/<class>/<image>``, and each
    image's caption is the name of its first-level sub-folder (sidecar captions are ignored then, no repeats).
    With metadata, the caption column holds the class names as usual. A `datasets` caption column
    of type ``ClassLabel`` (e.g. ``label``) is always mapped from ints to the class names.

    Raises:
        UserError: both or neither source given, missing/empty folder, unreadable metadata, a
            missing caption/image column, images without any caption, a kohya folder asking for 0 or more than
            :data:`MAX_FOLDER_REPEATS` repeats, or a dataset that fails to load.
    """
    say, instance_prompt = _checked_options(train_data_dir, dataset_name, max_train_samples, instance_prompt, log)
    if train_data_dir:  # given, as check_one_source reads it (an empty path is not)
        samples, folders = _load_folder(
            os.fspath(train_data_dir),
            caption_column,
            labels_from_folders,
            caption_extension=checked_caption_extension(caption_extension),
            instance_prompt=instance_prompt,
            log=say,
            exclude_keys=exclude_keys,
            masks=(mask_column, attach_masks),
        )
        return _numbered(samples, max_train_samples, folders, say)
    assert dataset_name  # check_one_source: exactly one of the two is given
    refuse_caption_extension_for_dataset(caption_extension, dataset_name, caption_column, "image")
    samples = load_dataset_samples(
        dataset_name,
        dataset_config_name,
        image_column,
        caption_column,
        max_train_samples,
        cache_dir,
        instance_prompt=instance_prompt,
        split=dataset_split,
        log=say,
        caption_column_given=caption_column_given,
        mask_column=mask_column if attach_masks else None,
    )
    return _numbered(samples, max_train_samples, {}, say)


def _checked_options(train_data_dir, dataset_name, max_train_samples, instance_prompt, log):
    """Refuse a bad source or ``--max_train_samples``; returns the ``log`` to use and the checked instance prompt."""
    check_one_source(train_data_dir, dataset_name, "images with captions")
    say = log if log is not None else listing.say
    if max_train_samples is not None and (
        isinstance(max_train_samples, bool) or not isinstance(max_train_samples, int) or max_train_samples < 1
    ):
        raise UserError(
            f"--max_train_samples must be a positive whole number, got {max_train_samples!r}. "
            f"Leave it unset to train on every sample."
        )
    return say, checked_instance_prompt(instance_prompt)


def _numbered(samples: list[RawSample], max_train_samples, folders, say) -> list[RawSample]:
    """The first ``max_train_samples``, each kohya folder's images repeated (said through ``say``), numbered 0..N-1."""
    if max_train_samples is not None:
        samples = samples[:max_train_samples]
    if folders:
        samples = repeat_folder_samples(samples, folders, say)
    return [dataclasses.replace(s, index=i) for i, s in enumerate(samples)]


def folder_image_keys(root: str) -> list[str]:
    """The keys of the images a listing of the folder ``root`` reads as samples, sorted: what the walk leaves out
    (hidden files, ``__MACOSX``) and its loss masks are not among them."""
    walked = _walk_folder(root, COMMON_CAPTION_EXTENSIONS)
    masks = folder_masks(root, walked[0], walked[2], MASK_COLUMN)
    return sorted(k for k in walked[0] if k not in masks.files)


def _walk_folder(
    root: str, caption_extensions: Iterable[str] = COMMON_CAPTION_EXTENSIONS, log: Callable[[str], Any] | None = None
) -> tuple[list[str], dict[str, str], list[tuple[str, str]]]:
    """Images, sidecar captions and metadata files under ``root`` (keys relative to it, "/"-separated).

    Captions map ``<image key without extension><extension, lower case>`` to the file's own key, for every
    extension of ``caption_extensions`` (matched case-insensitively, as image extensions are). Listed by
    :class:`~dit_lora.data.paths.FolderWalk`: links are never followed out of ``root`` (what was left out is said
    through ``log``).
    """
    wanted = {e.lower() for e in caption_extensions}
    images: list[str] = []
    captions: dict[str, str] = {}
    metadata_files: list[tuple[str, str]] = []  # (folder relative to root, file name)
    walk = FolderWalk(root)
    for dirpath, rel_dir, _, filenames in walk:
        present = [m for m in METADATA_FILENAMES if m in filenames]
        if len(present) > 1:
            where = os.path.join(dirpath, "")
            raise UserError(
                f"{where} holds both metadata.jsonl and metadata.csv, so it is unclear which "
                f"captions to use. Delete or rename one of them (see --train_data_dir)."
            )
        metadata_files.extend((rel_dir, m) for m in present)
        for name in filenames:
            rel = posixpath.join(rel_dir, name) if rel_dir else name
            stem, ext = posixpath.splitext(rel)
            if ext.lower() in IMAGE_EXTENSIONS:
                images.append(rel)
            elif ext.lower() in wanted:
                captions[stem + ext.lower()] = rel
    if log is not None:
        walk.report(log)
    return images, captions, metadata_files


def _metadata_captions(
    root: str, metadata_files: list[tuple[str, str]], caption_column: str, refused: list[RawSample]
) -> dict[str, tuple[int, list[str | None]]]:
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


def _check_folder(root: str) -> None:
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


def _report_unread_sidecars(
    from_metadata: dict, caption_files: dict[str, str], extension: str, log: Callable[[str], Any]
) -> None:
    """One line when images captioned by a metadata file also have a caption file beside them, which is not read
    (metadata wins; SimpleTuner users expect the .txt files to be read)."""
    shadowed = [
        caption_files[stem]
        for stem in (
            posixpath.splitext(key)[0] + extension.lower()
            for key, (_, captions) in from_metadata.items()
            if all(c is not None for c in captions)
        )
        if stem in caption_files
    ]
    if shadowed:
        log(
            f"{len(shadowed)} image(s) listed in a metadata file also have a {extension} caption file beside them "
            f"({name_some(sorted(shadowed))}): the metadata's caption is used and those files are not read (remove "
            f"the metadata file, or its rows, to train on them)"
        )


@dataclass
class _SidecarCaptions:
    """Reads each image's sidecar caption (``extension``) and counts what the log must say about captions."""

    root: str
    files: dict[str, str]  #: from :func:`_walk_folder`
    extension: str
    folders: dict[str, tuple[int, str]]  #: kohya folders, whose words caption an image without its own caption
    other_found: list[str] = field(default_factory=list)  #: caption files of another common extension, unread
    from_words: dict[str, int] = field(default_factory=dict)  #: kohya folder -> images captioned by its words
    noun: str = "image"  #: what the files are called in the log (``clip`` for video folders)
    multi_line: list[str] = field(default_factory=list)  #: caption files of more than one line (read whole)
    utf16: list[str] = field(default_factory=list)  #: caption files read as UTF-16 by their byte-order mark
    #: image key -> why its caption file cannot be read (:func:`~dit_lora.data.caption_files.caption_refusal`)
    refusals: dict[str, str] = field(default_factory=dict)

    def read(self, key: str) -> str | None:
        """The caption of image ``key`` from its sidecar file, else its kohya folder's words, else None; a caption
        file that is not UTF-8 gives None and its reason in :attr:`refusals` (ask :meth:`refusal`)."""
        stem = posixpath.splitext(key)[0]
        own = self.files.get(stem + self.extension.lower())
        if own is not None:
            with open(os.path.join(self.root, *own.split("/")), "rb") as handle:
                data = handle.read()
            try:
                text, utf16 = decode_caption(data)
            except NotUTF8 as err:
                self.refusals[key] = caption_refusal(own, err)
                return None
            if utf16:
                self.utf16.append(own)
            if "\n" in text:  # kohya's sd-scripts would train on the first line only: the log says so
                self.multi_line.append(own)
            return text
        other = next(
            (
                self.files[stem + e]
                for e in COMMON_CAPTION_EXTENSIONS
                if e != self.extension.lower() and stem + e in self.files
            ),
            None,
        )
        if other is not None:
            self.other_found.append(other)
        top = key.split("/", 1)[0] if "/" in key else None
        if top in self.folders and self.folders[top][1]:
            self.from_words[top] = self.from_words.get(top, 0) + 1
            return self.folders[top][1]
        return None

    def refusal(self, key: str) -> str | None:
        """Why the caption file of ``key`` cannot be read (not UTF-8), or None."""
        return self.refusals.get(key)

    def report(self, log: Callable[[str], Any]) -> None:
        """One line for unread captions of the other extension, one per kohya folder whose words were used, one for
        caption files read as UTF-16."""
        if self.utf16:
            log(
                f"{len(self.utf16)} caption file(s) are UTF-16 with a byte-order mark: read as UTF-16 (kohya's "
                f"sd-scripts and diffusers read UTF-8 only; re-save them as UTF-8 for those): {name_some(self.utf16)}"
            )
        if self.other_found:
            ext = posixpath.splitext(self.other_found[0])[1]
            log(
                f"{len(self.other_found)} {self.noun}(s) have no {self.extension} caption file but a {ext} one beside "
                f"them ({name_some(self.other_found)}): those are not read; pass --caption_extension {ext.lower()} "
                f"to use them."
            )
        if self.multi_line:
            log(
                f"{len(self.multi_line)} caption file(s) hold more than one line: the whole file is each caption, "
                f"line breaks included (kohya's sd-scripts read the first line only; musubi-tuner reads the whole "
                f"file too): {name_some(self.multi_line)}"
            )
        for top, count in self.from_words.items():
            log(
                f"`{top}/`: {count} {self.noun}(s) without a {self.extension} caption are captioned "
                f"{self.folders[top][1]!r}, the folder's words (kohya's class tokens)"
            )


def _load_folder(
    root: str,
    caption_column: str,
    labels_from_folders: bool = False,
    *,
    caption_extension: str = ".txt",
    instance_prompt: str | None = None,
    log: Callable[[str], Any] = print,
    exclude_keys: frozenset[str] = frozenset(),
    masks: tuple[str, bool] = (MASK_COLUMN, False),
) -> tuple[list[RawSample], dict[str, tuple[int, str]]]:
    """The samples of a folder (sorted by key) and its kohya ``N_words`` folders (see :func:`load_samples`); the loss
    masks (:mod:`.masks`, ``masks``: the metadata's mask column, and whether to attach them) are no samples."""
    _check_folder(root)
    walked = _walk_folder(root, {*COMMON_CAPTION_EXTENSIONS, caption_extension}, log)
    found = folder_masks(root, walked[0], walked[2], masks[0])
    found.report(log, attached=masks[1])
    samples, folders = _folder_samples(
        root,
        walked,
        caption_column,
        labels_from_folders,
        caption_extension=caption_extension,
        instance_prompt=instance_prompt,
        log=log,
        exclude_keys=exclude_keys | found.files,
    )
    return (found.attach(samples) if masks[1] else samples), folders


def _folder_samples(
    root: str,
    walked: tuple[list[str], dict[str, str], list[tuple[str, str]]],
    caption_column: str,
    labels_from_folders: bool,
    *,
    caption_extension: str,
    instance_prompt: str | None,
    log: Callable[[str], Any],
    exclude_keys: frozenset[str],
) -> tuple[list[RawSample], dict[str, tuple[int, str]]]:
    """:func:`_load_folder`'s samples from the folder's listing (``walked``: :func:`_walk_folder`)."""
    images, caption_files, metadata_files = walked
    images = [key for key in images if key not in exclude_keys]
    refused: list[RawSample] = []  # outside the folder: kept (screening quarantines them), never opened
    from_metadata = _metadata_captions(root, metadata_files, caption_column, refused)
    if not images and not from_metadata and not refused:
        raise UserError(
            f"--train_data_dir {root!r} contains no images (looked for "
            f"{', '.join(sorted(IMAGE_EXTENSIONS))} in it and its subfolders, case-insensitive). "
            f"Point --train_data_dir at the folder that holds the images."
        )
    if labels_from_folders and not metadata_files:
        if instance_prompt is not None:
            raise UserError(
                f"--instance_prompt gives every image one caption, but this model learns class labels, read from the "
                f"sub-folder names of --train_data_dir {root!r} (root/<class>/<image>). Leave --instance_prompt unset."
            )
        return _class_folder_samples(root, images), {}
    folders = _kohya_folders(root, set(images) | set(from_metadata))
    keys = sorted(set(images) | set(from_metadata))
    if instance_prompt is not None:
        return _instance_samples(
            root, keys, refused, instance_prompt, len(caption_files) + len(from_metadata), log
        ), folders
    sidecar = _SidecarCaptions(root, caption_files, caption_extension, folders)
    samples: list[RawSample] = list(refused)
    uncaptioned: list[str] = []
    abs_root = os.path.abspath(root)  # absolute paths keep samples valid if the working directory changes
    for key in keys:
        path = os.path.normpath(os.path.join(abs_root, *key.split("/")))
        captions = from_metadata[key][1] if key in from_metadata else [None]
        if any(c is None for c in captions):
            # Metadata wins, but a row with an empty caption cell falls back to the sidecar file beside it.
            fallback = sidecar.read(key)
            if sidecar.refusal(key) is not None:  # not UTF-8: refused with the reason, all of them named together
                samples.append(RawSample(key=key, caption="", refused=sidecar.refusal(key)))
                continue
            captions = [fallback if c is None else c for c in captions]
        for caption in captions:
            if caption is None:
                uncaptioned.append(key)
            else:
                samples.append(RawSample(key=key, caption=caption, path=path))
    sidecar.report(log)
    _report_unread_sidecars(from_metadata, caption_files, caption_extension, log)
    if uncaptioned:
        other = (
            f" The {posixpath.splitext(sidecar.other_found[0])[1]} files beside them are read with "
            f"--caption_extension {posixpath.splitext(sidecar.other_found[0])[1].lower()}."
            if sidecar.other_found
            else ""
        )
        raise UserError(
            f"{len(uncaptioned)} image(s) in --train_data_dir {root!r} have no caption: {name_some(uncaptioned)}. "
            f"Add a metadata.jsonl beside them with one line per image, e.g. "
            f'{{"file_name": "0001.png", "{caption_column}": "a photo of ..."}}, '
            f"put a {caption_extension} file with the same name next to each image "
            f"(0001.png -> 0001{caption_extension}), or give them all one caption with --instance_prompt.{other}"
        )
    return sorted(samples, key=lambda s: s.key), folders  # refused rows among the others; stable: row order kept


def _instance_samples(
    root: str, keys: list[str], refused: list[RawSample], prompt: str, unread: int, log: Callable[[str], Any]
) -> list[RawSample]:
    """Every image captioned ``prompt`` (``--instance_prompt``), as diffusers' DreamBooth scripts caption a folder."""
    abs_root = os.path.abspath(root)
    samples = list(refused) + [
        RawSample(key=key, caption=prompt, path=os.path.normpath(os.path.join(abs_root, *key.split("/"))))
        for key in keys
    ]
    log(
        f"--instance_prompt: all {len(keys)} image(s) of --train_data_dir are captioned {prompt!r}"
        + (f"; their own captions ({unread} caption file(s) or metadata row(s)) are not read" if unread else "")
        + " (diffusers' DreamBooth scripts do the same)"
    )
    return sorted(samples, key=lambda s: s.key)


def class_folder_names(root: str | None) -> list[str] | None:
    """The class names of an imagefolder-by-class ``root`` (sorted sub-folders holding an image), read without
    walking every image; None when ``root`` is not such a folder (missing, or labelled by a metadata file)."""
    if not root or not os.path.isdir(root) or any(os.path.isfile(os.path.join(root, m)) for m in METADATA_FILENAMES):
        return None

    def has_image(folder: str) -> bool:  # stops at the first image, at any depth
        return any(os.path.splitext(f)[1].lower() in IMAGE_EXTENSIONS for _, _, files in os.walk(folder) for f in files)

    names = [
        e.name
        for e in sorted(os.scandir(root), key=lambda e: e.name)
        # a linked folder is no class: the listing never follows it (data/paths.py's FolderWalk)
        if e.is_dir() and not e.is_symlink() and not e.name.startswith(".") and has_image(e.path)
    ]
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


def read_metadata(root: str, rel_dir: str, name: str, caption_column: str) -> list[tuple[str, str | None, str | None]]:
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
