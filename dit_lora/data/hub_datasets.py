"""``--dataset_name``: image samples of a `datasets` dataset (local folder or Hugging Face Hub).

The helpers here (loading, captions, column checks, placing path strings) are shared with the video
datasets (:mod:`.video_prepare`).
"""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any

from dit_lora.core.errors import UserError
from dit_lora.data.paths import FolderWalk, Located, locate
from dit_lora.data.samples import RawSample, caption_value, name_some, suggest_caption_column


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


#: a single data file ``--dataset_name`` may name, and the `datasets` builder that reads it
DATA_FILE_BUILDERS = {".parquet": "parquet", ".csv": "csv", ".json": "json", ".jsonl": "json"}
#: what ``save_to_disk`` writes: a Dataset's folder holds the first two, a DatasetDict's the last
SAVED_DATASET_FILES = ("state.json", "dataset_info.json")
SAVED_DATASET_DICT_FILE = "dataset_dict.json"


def local_root(dataset_name: str) -> str | None:
    """The local folder ``--dataset_name`` reads from: the folder itself, a data file's folder; None for a Hub id."""
    if os.path.isdir(dataset_name):
        return dataset_name
    if os.path.isfile(dataset_name):
        return os.path.dirname(os.path.abspath(dataset_name))
    return None


def open_dataset(
    dataset_name: str, config_name: str | None, cache_dir: str | None, *, what: str = "images", split: str = "train"
) -> Any:
    """The ``split`` of ``--dataset_name``; a failure is one UserError.

    A folder written by ``save_to_disk`` (a Dataset, or a DatasetDict's ``split``) is read with
    ``datasets.load_from_disk``; a single ``.parquet``/``.csv``/``.json``/``.jsonl`` file with its builder
    (``load_dataset("parquet", data_files=FILE)``); anything else with ``datasets.load_dataset``. A bare builder
    name (``parquet``, ``imagefolder``) is refused: without data files it reads the working directory. No Hub call
    is made for a local path. ``what`` ("images" or "videos") only words the hints of the error messages.
    """
    import datasets  # slow import; only paid when --dataset_name is used

    if os.path.isdir(dataset_name):
        _refuse_links_out(dataset_name, what)
    if os.path.isdir(dataset_name) and _saved_kind(dataset_name):
        return _load_saved(dataset_name, split)
    if os.path.isfile(dataset_name):
        return _load_data_file(dataset_name, split, cache_dir, what)
    if not os.path.exists(dataset_name):
        _refuse_bare_builder(dataset_name, what)
    return _load_with_datasets(
        dataset_name,
        config_name,
        split,
        cache_dir,
        what,
        lambda: datasets.load_dataset(dataset_name, config_name, split=split, cache_dir=cache_dir),
    )


def _refuse_links_out(folder: str, what: str) -> None:
    """Refuse a local dataset folder holding links that lead out of it (or loop), in one paragraph: `datasets` lists
    and reads a folder itself, following its links, so they cannot be left out as a data folder's are
    (:class:`~dit_lora.data.paths.FolderWalk`)."""
    walk = FolderWalk(folder)
    for _ in walk:
        pass
    if walk.left_out:
        key, leads = walk.left_out[0]
        raise UserError(
            f"--dataset_name {folder!r} holds {len(walk.left_out)} link(s) that lead out of the folder or loop (e.g. "
            f"{key!r} -> {leads}), and `datasets` would follow them and read {what} from outside it. Remove those "
            f"links or copy their files into the folder; or pass the folder as --train_data_dir (a folder of {what} "
            f"with metadata.jsonl), which leaves such links out."
        )


def _saved_kind(folder: str) -> str | None:
    """``"dict"``/``"dataset"`` for a folder ``save_to_disk`` wrote, else None."""
    if os.path.isfile(os.path.join(folder, SAVED_DATASET_DICT_FILE)):
        return "dict"
    if all(os.path.isfile(os.path.join(folder, f)) for f in SAVED_DATASET_FILES):
        return "dataset"
    return None


def _load_saved(folder: str, split: str) -> Any:
    import datasets

    try:
        loaded = datasets.load_from_disk(folder)
    except Exception as err:
        raise UserError(
            f"--dataset_name {folder!r} looks like a folder written by `save_to_disk`, but "
            f"`datasets.load_from_disk` could not read it ({_detail(err)}). Write it again with "
            f"Dataset.save_to_disk / DatasetDict.save_to_disk, or pass the original files."
        ) from None
    if not isinstance(loaded, datasets.DatasetDict):
        return loaded
    if split not in loaded:
        splits = ", ".join(repr(name) for name in loaded)
        raise UserError(
            f"--dataset_name {folder!r} is a DatasetDict written by `save_to_disk` with the splits {splits} and no "
            f"{split!r} split. Pick the split to train on with --dataset_split (e.g. --dataset_split "
            f"{next(iter(loaded))})."
        )
    return loaded[split]


def _load_data_file(path: str, split: str, cache_dir: str | None, what: str) -> Any:
    import datasets

    builder = DATA_FILE_BUILDERS.get(os.path.splitext(path)[1].lower())
    if builder is None:
        raise UserError(
            f"--dataset_name {path!r} is a file that `datasets` is not asked to read: a single file must be "
            f"{', '.join(DATA_FILE_BUILDERS)}. Pass such a file, the folder holding your data, or, for a folder of "
            f"{what} with metadata.jsonl, --train_data_dir."
        )
    # One data file is the 'train' split of its builder; --dataset_split names no other split of it.
    return _load_with_datasets(
        path,
        None,
        split,
        cache_dir,
        what,
        lambda: datasets.load_dataset(
            builder, data_files={split: os.path.abspath(path)}, split=split, cache_dir=cache_dir
        ),
    )


def _refuse_bare_builder(dataset_name: str, what: str) -> None:
    """A `datasets` builder name without data files (``parquet``) reads the working directory: one UserError."""
    from datasets.packaged_modules import _PACKAGED_DATASETS_MODULES

    if dataset_name.strip().lower() in _PACKAGED_DATASETS_MODULES:
        raise UserError(
            f"--dataset_name {dataset_name!r} names a `datasets` file format, not your data: without data files it "
            f"would read the files of the working directory ({os.getcwd()}). Point --dataset_name at your file "
            f"(e.g. --dataset_name data/train.parquet, or a .csv/.json/.jsonl file) or the folder that holds it, or "
            f"pass a folder of {what} with metadata.jsonl as --train_data_dir."
        )


def _detail(err: BaseException) -> str:
    detail = " ".join(str(err).split())
    return f"{type(err).__name__}: " + detail[:400] + ("..." if len(detail) > 400 else "")


def _load_with_datasets(
    dataset_name: str, config_name: str | None, split: str, cache_dir: str | None, what: str, load: Callable[[], Any]
) -> Any:
    """``load()``, with any failure as the one paragraph that names the dataset and the likely fix."""
    try:
        return load()
    except Exception as err:
        config = f" (config {config_name!r})" if config_name else ""
        if os.path.isfile(dataset_name):
            hint = "Check that the file is whole and in the format its name says."
        elif os.path.isdir(dataset_name):
            hint = (
                f"The folder exists but `datasets` could not read it as a dataset with a {split!r} split; "
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
        raise UserError(f"Could not load --dataset_name {dataset_name!r}{config}: {_detail(err)}. {hint}") from None


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


def check_dataset_columns(
    dataset_name: str,
    available: list[str],
    media_column: str,
    caption_column: str,
    what: str = "images",
    media_hint: str = "",
) -> None:
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
    *,
    instance_prompt: str | None = None,
    split: str = "train",
    log: Callable[[str], Any] = print,
    caption_column_given: bool = False,
    mask_column: str | None = None,
) -> list[RawSample]:
    """The samples of ``--dataset_name``'s ``split`` (see :func:`~dit_lora.data.sources.load_samples`); with
    ``instance_prompt`` every row is captioned with it and the caption column is not read, unless
    ``caption_column_given`` (``--caption_column`` set explicitly): then, as diffusers' ``DreamBoothDataset``, the
    column's captions are used and only empty ones take the instance prompt (said through ``log``). With
    ``mask_column`` (``--masked_loss``) each row's cell of that column, when the dataset has it, is its loss mask."""
    dataset = open_dataset(dataset_name, config_name, cache_dir, what="images", split=split)
    # With --instance_prompt no caption column is needed: the image column stands in for it in the check.
    fallback = instance_prompt is not None and caption_column_given
    check_dataset_columns(
        dataset_name,
        list(dataset.column_names),
        image_column,
        caption_column if instance_prompt is None or fallback else image_column,
    )
    if max_train_samples is not None and max_train_samples < len(dataset):
        dataset = dataset.select(range(max_train_samples))

    handle, placed = _image_column(dataset, dataset_name, image_column, "--image_column")
    masks = None
    if mask_column is not None and mask_column in dataset.column_names:
        masks, _ = _image_column(dataset, dataset_name, mask_column, "--mask_column")
    if fallback and instance_prompt is not None:  # fallback implies the prompt; said again for the type
        captions = _captions_or_instance_prompt(dataset, dataset_name, caption_column, instance_prompt, log)
    elif instance_prompt is not None:
        captions = [(row, instance_prompt) for row in range(len(dataset))]
        log(
            f"--instance_prompt: all {len(captions)} row(s) of --dataset_name are captioned {instance_prompt!r}; "
            f"the caption column is not read (as diffusers' DreamBooth scripts without --caption_column; give "
            f"--caption_column to use it, the prompt filling only its empty captions)"
        )
    else:
        captions = dataset_captions(dataset, dataset_name, caption_column)
    samples = []
    for row, caption in captions:
        located = placed[row] if placed else None
        refused = located.refused if located is not None else None
        samples.append(
            RawSample(
                key=f"{dataset_name}[{row}]",
                caption=caption,
                refused=refused,
                _images=None if refused else handle,
                _row=row,
                _masks=masks,
            )
        )
    return samples


def _image_column(
    dataset: Any, dataset_name: str, column: str, flag: str
) -> tuple[DatasetImages, list[Located | None] | None]:
    """A column of images (read undecoded) or of path strings (each placed now, so a refused row is never opened) as a
    :class:`DatasetImages`, and the placed paths (None for images)."""
    import datasets  # slow import; only paid when --dataset_name is used

    feature = dataset.features[column]
    images = dataset.select_columns([column])
    if isinstance(feature, datasets.Image):
        images = images.cast_column(column, datasets.Image(decode=False))
    elif not (isinstance(feature, datasets.Value) and feature.dtype in ("string", "large_string")):
        raise UserError(
            f"Column {column!r} of --dataset_name {dataset_name!r} holds {feature!r}, not images "
            f"or image paths. Pass {flag} with the column of images "
            f"(columns: {', '.join(map(repr, dataset.column_names))})."
        )
    placed = None
    if not isinstance(feature, datasets.Image):
        root = dataset_files_root(dataset_name)
        placed = [
            place_dataset_path(root, dataset_name, value, f"row {row}: {column}")
            if isinstance(value, str) and value.strip()
            else None
            for row, value in enumerate(images[column])
        ]
    return DatasetImages(images, column, local_root(dataset_name) or os.getcwd(), placed), placed


def _captions_or_instance_prompt(
    dataset: Any, dataset_name: str, caption_column: str, prompt: str, log: Callable[[str], Any]
) -> list[tuple[int, str]]:
    """(row, caption): the column's caption, or ``prompt`` where it is empty (diffusers' DreamBooth rule with both
    ``--caption_column`` and ``--instance_prompt``); how many took the prompt is said through ``log``."""
    import datasets

    feature = dataset.features[caption_column]
    to_name = feature.int2str if isinstance(feature, datasets.ClassLabel) else None
    captions: list[tuple[int, str]] = []
    filled = 0
    for row, value in enumerate(dataset[caption_column]):
        if to_name is not None and value is not None:
            value = to_name(value) if value >= 0 else None
        caption = caption_value(value)
        if not caption:  # None or blank
            caption, filled = prompt, filled + 1
        captions.append((row, caption))
    log(
        f"--caption_column {caption_column!r} with --instance_prompt: {len(captions) - filled} row(s) of "
        f"--dataset_name keep their own caption, {filled} empty one(s) take {prompt!r} (diffusers' DreamBooth rule)"
    )
    return captions


def dataset_files_root(dataset_name: str) -> str | None:
    """The folder a path string in ``--dataset_name``'s cells may name files in, or None (none on this machine).

    A local dataset: its folder (a single data file's folder), under the rule of :mod:`.paths` (as ``metadata.jsonl``'s ``file_name``). A Hub
    dataset: its own files, i.e. its repository's snapshot in the Hugging Face Hub cache, where ``load_dataset``
    downloads its data files (a path names a file of the repository, e.g. after ``hf download``); None when no
    snapshot is there. Its paths were written on another machine: they never name a file of this one (the
    working directory, ``/etc``), which is what joining them onto the working directory used to do.
    ``datasets.Image``/``Video`` cells are not placed: they hold bytes, or a file `datasets` itself wrote or
    resolved (its folder builders refuse a ``file_name`` with ``..`` or an absolute one).
    """
    if local_root(dataset_name) is not None:  # a folder, or a data file's folder: no Hub call for a local path
        return local_root(dataset_name)
    try:
        from huggingface_hub import snapshot_download

        return snapshot_download(dataset_name, repo_type="dataset", local_files_only=True)
    except Exception:
        return None


def place_dataset_path(root: str | None, dataset_name: str, written: str, field: str) -> Located:
    """Place a path string of a ``--dataset_name`` cell (``field`` names its row and column) inside ``root``
    (:func:`dataset_files_root`), or refuse it with the reason (quarantined, shown by check-data, never opened)."""
    folder = local_root(dataset_name)
    if folder is not None:
        return locate(root or folder, written, field=field)
    if root is None:
        return Located(
            written,
            None,
            (
                f"{field} {written!r} is a path, and Hub dataset {dataset_name!r} has no files in the Hugging Face "
                f"cache (refused, never opened): a Hub dataset's paths may only name its own files. Download them "
                f"(hf download {dataset_name} --repo-type dataset), or use a dataset whose column holds the files"
            ),
        )
    return locate(
        root,
        written,
        field=field,
        hint=f" (for Hub dataset {dataset_name!r} that folder is its "
        f"download in the Hugging Face cache: its paths may only name the dataset's own files)",
    )
