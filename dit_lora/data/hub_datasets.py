"""``--dataset_name``: image samples of a `datasets` dataset (local folder or Hugging Face Hub).

The helpers here (loading, captions, column checks, placing path strings) are shared with the video
datasets (:mod:`.video_prepare`).
"""

from __future__ import annotations

import os
from typing import Any

from dit_lora.errors import UserError

from .paths import Located, locate
from .sources import RawSample, caption_value, name_some, suggest_caption_column


class DatasetImages:
    """Lazy access to one image column of a `datasets` dataset, shared by all its samples.

    The column is cast to ``Image(decode=False)`` so reading a row yields the encoded bytes (or a
    path) instead of a decoded PIL image: hashing needs the bytes and decoding is deferred to
    whoever actually wants pixels. ``placed`` holds, for a column of path strings, each row's file as
    :func:`place_dataset_path` placed it (read once at load time, so a refused row never gets here).
    """

    def __init__(self, dataset: Any, column: str, base_dir: str, placed: list[Located | None] | None = None) -> None:
        self.dataset = dataset
        self.column = column
        self.base_dir = base_dir
        self.placed = placed

    def raw(self, row: int) -> Any:
        return self.dataset[row][self.column]

    def resolve(self, path: str) -> str:
        """The file of an ``Image`` cell's path (written by `datasets` itself, see :func:`place_dataset_path`)."""
        return path if os.path.isabs(path) else os.path.join(self.base_dir, path)

    def string_path(self, row: int, value: str) -> str:
        """The file a path-string cell names, as placed at load time (never outside the dataset's files)."""
        located = self.placed[row] if self.placed is not None else None
        if located is None or located.path is None:
            raise ValueError(located.refused if located is not None else f"row {row}: {value!r} was never placed")
        return located.path


def open_dataset(dataset_name: str, config_name: str | None, cache_dir: str | None, *, what: str = "images") -> Any:
    """The 'train' split of ``datasets.load_dataset(dataset_name, config_name)``; a failure is one UserError.

    ``what`` ("images" or "videos") only words the hint of the error message.
    """
    import datasets  # slow import; only paid when --dataset_name is used

    local = os.path.isdir(dataset_name)
    try:
        return datasets.load_dataset(dataset_name, config_name, split="train", cache_dir=cache_dir)
    except Exception as err:  # noqa: BLE001 - every load failure becomes one actionable message
        detail = " ".join(str(err).split())
        detail = detail[:400] + ("..." if len(detail) > 400 else "")
        config = f" (config {config_name!r})" if config_name else ""
        if local:
            hint = (
                "The folder exists but `datasets` could not read it as a dataset with a 'train' split; "
                f"for a folder of {what} with metadata.jsonl"
                + (" or .txt captions" if what == "images" else " (or prompts.txt + videos.txt)")
                + " pass it as --train_data_dir instead."
            )
        else:
            hint = (
                "If it is a Hugging Face Hub dataset, check the name and network access (offline, "
                "download it beforehand and keep --cache_dir pointing at that download); if your "
                f"{what} are in a local folder, pass --train_data_dir PATH instead."
            )
        raise UserError(
            f"Could not load --dataset_name {dataset_name!r}{config}: {type(err).__name__}: {detail}. {hint}"
        ) from None


def dataset_captions(dataset: Any, dataset_name: str, caption_column: str) -> list[tuple[int, str]]:
    """(row, caption) of every row; a ``ClassLabel`` column gives class names. Uncaptioned rows are one UserError."""
    import datasets

    captions: list[tuple[int, str]] = []
    uncaptioned: list[str] = []
    caption_feature = dataset.features[caption_column]
    # A ClassLabel column (imagefolder's `label`, CIFAR-10's `label`, ...) stores ints: use the class names.
    to_name = caption_feature.int2str if isinstance(caption_feature, datasets.ClassLabel) else None
    for row, value in enumerate(dataset[caption_column]):
        if to_name is not None and value is not None:
            value = to_name(value) if value >= 0 else None  # -1: no label
        caption = caption_value(value)
        if caption is None:
            uncaptioned.append(f"{dataset_name}[{row}]")
        else:
            captions.append((row, caption))
    if uncaptioned:
        named = name_some(uncaptioned)
        raise UserError(
            f"{len(uncaptioned)} row(s) of --dataset_name {dataset_name!r} have no caption in column "
            f"{caption_column!r}: {named}. Fill them in, drop those rows, or pick another "
            f"--caption_column."
        )
    if not captions:
        raise UserError(
            f"--dataset_name {dataset_name!r} has an empty 'train' split. Check the dataset name and "
            f"--dataset_config_name."
        )
    return captions


def check_dataset_columns(dataset_name: str, available: list[str], media_column: str, caption_column: str,
                          what: str = "images", media_hint: str = "") -> None:
    """Raise the one paragraph for a dataset without its media column (``--image_column``/``--video_column``)
    or its caption column, listing the columns it has and suggesting a likely caption column."""
    listed = ", ".join(repr(c) for c in available)
    if media_column not in available:
        flag = "--image_column" if what == "images" else "--video_column"
        raise UserError(
            f"--dataset_name {dataset_name!r} has no {what[:-1]} column {media_column!r} (columns: {listed}). "
            f"Pass {flag} with the column that holds the {what}{media_hint}."
        )
    if caption_column in available:
        return
    txt_hint = (
        f" If the captions are .txt files beside the {what}, pass the folder as --train_data_dir instead."
        if os.path.isdir(dataset_name) and what == "images"
        else ""
    )
    raise UserError(
        f"--dataset_name {dataset_name!r} has no caption column {caption_column!r} (columns: "
        f"{listed}). Pass --caption_column with the column that holds the captions"
        f"{suggest_caption_column(available, exclude=media_column)}.{txt_hint}"
    )


def load_dataset_samples(
    dataset_name: str,
    config_name: str | None,
    image_column: str,
    caption_column: str,
    max_train_samples: int | None,
    cache_dir: str | None,
) -> list[RawSample]:
    """The samples of ``--dataset_name``'s 'train' split (see :func:`~dit_lora.data.sources.load_samples`)."""
    import datasets  # slow import; only paid when --dataset_name is used

    local = os.path.isdir(dataset_name)
    dataset = open_dataset(dataset_name, config_name, cache_dir, what="images")
    check_dataset_columns(dataset_name, list(dataset.column_names), image_column, caption_column)
    if max_train_samples is not None and max_train_samples < len(dataset):
        dataset = dataset.select(range(max_train_samples))

    feature = dataset.features[image_column]
    images = dataset.select_columns([image_column])
    if isinstance(feature, datasets.Image):
        images = images.cast_column(image_column, datasets.Image(decode=False))
    elif not (isinstance(feature, datasets.Value) and feature.dtype in ("string", "large_string")):
        raise UserError(
            f"Column {image_column!r} of --dataset_name {dataset_name!r} holds {feature!r}, not images "
            f"or image paths. Pass --image_column with the column of images "
            f"(columns: {', '.join(map(repr, dataset.column_names))})."
        )
    placed = None
    if not isinstance(feature, datasets.Image):  # path strings: placed now, so a refused row is never opened
        root = dataset_files_root(dataset_name)
        placed = [place_dataset_path(root, dataset_name, value, f"row {row}: {image_column}")
                  if isinstance(value, str) and value.strip() else None
                  for row, value in enumerate(images[image_column])]
    handle = DatasetImages(images, image_column, dataset_name if local else os.getcwd(), placed)
    samples = []
    for row, caption in dataset_captions(dataset, dataset_name, caption_column):
        refused = placed[row].refused if placed and placed[row] is not None else None
        samples.append(RawSample(key=f"{dataset_name}[{row}]", caption=caption, refused=refused,
                                 _images=None if refused else handle, _row=row))
    return samples


def dataset_files_root(dataset_name: str) -> str | None:
    """The folder a path string in ``--dataset_name``'s cells may name files in, or None (none on this machine).

    A local dataset: its folder, under the rule of :mod:`.paths` (as ``metadata.jsonl``'s ``file_name``). A Hub
    dataset: its own files, i.e. its repository's snapshot in the Hugging Face Hub cache, where ``load_dataset``
    downloads its data files (a path names a file of the repository, e.g. after ``hf download``); None when no
    snapshot is there. Its paths were written on another machine: they never name a file of this one (the
    working directory, ``/etc``), which is what joining them onto the working directory used to do.
    ``datasets.Image``/``Video`` cells are not placed: they hold bytes, or a file `datasets` itself wrote or
    resolved (its folder builders refuse a ``file_name`` with ``..`` or an absolute one).
    """
    if os.path.isdir(dataset_name):
        return dataset_name
    try:
        from huggingface_hub import snapshot_download

        return snapshot_download(dataset_name, repo_type="dataset", local_files_only=True)
    except Exception:  # noqa: BLE001 - not cached, or not a repository name: no folder to place paths in
        return None


def place_dataset_path(root: str | None, dataset_name: str, written: str, field: str) -> Located:
    """Place a path string of a ``--dataset_name`` cell (``field`` names its row and column) inside ``root``
    (:func:`dataset_files_root`), or refuse it with the reason (quarantined, shown by check-data, never opened)."""
    if os.path.isdir(dataset_name):
        return locate(root or dataset_name, written, field=field)
    if root is None:
        return Located(written, None, (
            f"{field} {written!r} is a path, and Hub dataset {dataset_name!r} has no files in the Hugging Face "
            f"cache (refused, never opened): a Hub dataset's paths may only name its own files. Download them "
            f"(hf download {dataset_name} --repo-type dataset), or use a dataset whose column holds the files"))
    return locate(root, written, field=field, hint=f" (for Hub dataset {dataset_name!r} that folder is its "
                  f"download in the Hugging Face cache: its paths may only name the dataset's own files)")
