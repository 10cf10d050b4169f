"""kohya-ss folder layouts and the options peers' data habits bring, shared by image and video folders.

* ``N_words/`` folders (sd-scripts' DreamBooth layout): each image or clip in one is listed N times per epoch, its
  copies (``repeat`` 1..N-1) sharing key, file, caption and so one cache entry; ``words`` caption a file without
  its own caption (:func:`kohya_folder`, :func:`kohya_folders`, :func:`repeat_folder_samples`).
* ``--caption_extension`` and ``--instance_prompt`` checked once (:func:`checked_caption_extension`,
  :func:`checked_instance_prompt`).
* Copies are screened once: :func:`copy_of` maps every sample to the one it repeats, so decoding, quarantining and
  the bad fraction count files, not copies.

Nothing here decodes or reads a file; :mod:`.sources` (images) and :mod:`.video_sources` (clips) use it.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterable, Sequence
from typing import Any

from dit_lora.core.errors import UserError

__all__ = [
    "MAX_FOLDER_REPEATS",
    "checked_caption_extension",
    "checked_instance_prompt",
    "copy_of",
    "copies_note",
    "folder_of",
    "head_of",
    "kohya_folder",
    "kohya_folders",
    "nested_lines",
    "plural",
    "repeat_folder_samples",
]

#: the most repeats a kohya folder name (``N_words``) may ask for; a larger N is far more likely a name (``2024_trip``)
MAX_FOLDER_REPEATS = 1000


def checked_caption_extension(extension: str) -> str:
    """``--caption_extension`` with its leading dot (``caption`` -> ``.caption``); one without a name is refused."""
    text = (extension or "").strip()
    if not text.lstrip("."):
        raise UserError(
            f"--caption_extension {extension!r} names no extension. Give the ending of the caption file beside each "
            f"image or clip: .txt (the default) or .caption (kohya's sd-scripts)."
        )
    return text if text.startswith(".") else "." + text


def checked_instance_prompt(prompt: str | None) -> str | None:
    """``--instance_prompt`` stripped; a blank one is refused (it would caption every image with nothing)."""
    if prompt is None:
        return None
    if not prompt.strip():
        raise UserError(
            "--instance_prompt is empty. Give the one caption every image or clip is trained with, e.g. "
            '--instance_prompt "a photo of sks dog", or leave it unset to read each file\'s own caption.'
        )
    return prompt.strip()


def kohya_folder(name: str) -> tuple[int, str] | None:
    """``(N, words)`` of a kohya-ss DreamBooth folder name ``N_words``, or None when it is not one.

    Read exactly as sd-scripts' ``extract_dreambooth_params`` (``library/config_util.py``) reads it: the text before
    the first ``_`` is N when Python's ``int`` parses it, the rest is the class tokens (``"10_sks dog"`` ->
    ``(10, "sks dog")``, ``"10"`` -> ``(10, "")``, ``"2024_trip"`` -> ``(2024, "trip")``; ``"trip_2024"`` -> None).
    """
    head, _, words = name.partition("_")
    try:
        return int(head), words
    except ValueError:
        return None


def folder_of(key: str) -> str | None:
    """The first-level folder of a key relative to the data folder (``"3_cat/a.png"`` -> ``"3_cat"``), or None."""
    return key.split("/", 1)[0] if "/" in key else None


def kohya_folders(root: str, keys: Iterable[str], noun: str = "image") -> dict[str, tuple[int, str]]:
    """The first-level ``N_words`` folders among ``keys``; an N below 1 or above :data:`MAX_FOLDER_REPEATS` is one
    UserError (sd-scripts skips a 0 folder without a word and reads ``2024_trip`` as 2024 repeats). ``noun`` names
    the files in the message (``image``, ``clip``)."""
    folders: dict[str, tuple[int, str]] = {}
    for top in sorted({folder for folder in map(folder_of, keys) if folder is not None}):
        parsed = kohya_folder(top)
        if parsed is None:
            continue
        repeats, words = parsed
        if not 1 <= repeats <= MAX_FOLDER_REPEATS:
            why = (
                (
                    f"0 or fewer repeats would leave its {noun}s out (kohya's sd-scripts skips such a folder without "
                    "a word)"
                )
                if repeats < 1
                else (f"{repeats} repeats is more than {MAX_FOLDER_REPEATS}, far more likely a name than a count")
            )
            raise UserError(
                f"Folder {top!r} in --train_data_dir {root!r} reads as kohya's `N_words` layout (as sd-scripts reads "
                f"it: N = {repeats}, each {noun} listed N times per epoch, {words!r} the class tokens), but {why}. "
                f"Rename it: `{max(1, min(repeats, 10)) if repeats >= 1 else 1}_{words or 'name'}` for that many "
                f"repeats, or a name that does not start with a number and `_` (e.g. `trip_{head_of(top)}`) to "
                f"list each {noun} once."
            )
        folders[top] = (repeats, words)
    return folders


def head_of(name: str) -> str:
    """The text before the first ``_`` of a folder name (used in the rename hint)."""
    return name.partition("_")[0]


def repeat_folder_samples(
    samples: list, folders: dict[str, tuple[int, str]], log: Callable[[str], Any], noun: str = "image"
) -> list:
    """Each sample of an ``N_words`` folder followed by its N-1 copies (``repeat`` 1..N-1), one log line per folder.

    Works on any frozen dataclass with ``key`` and ``repeat`` (:class:`~dit_lora.data.sources.RawSample`,
    :class:`~dit_lora.data.video.VideoSample`). The copies keep key, file and caption, so they name one cache entry
    (encoded once) and one crop; their own index gives each its own flip per epoch
    (:class:`~dit_lora.data.batches.EpochBatches`), as kohya's repeats do. ``noun`` names the files in the log.
    Files in sub-folders of an ``N_words`` folder train with its repeats and words (kohya's sd-scripts would not
    read them): one more line per such folder says so.
    """
    out: list = []
    counts: dict[str, int] = {}
    for sample in samples:
        top = folder_of(sample.key)
        repeats = folders[top][0] if top in folders else 1
        if top in folders:
            counts[top] = counts.get(top, 0) + 1
        out.append(sample)
        out.extend(dataclasses.replace(sample, repeat=r) for r in range(1, repeats))
    for top, count in counts.items():
        repeats = folders[top][0]
        log(
            f"`{top}/`: {count} {noun}(s) x {plural(repeats, 'repeat')} = {plural(count * repeats, 'sample')} per "
            f"epoch (kohya's N_words folder)"
        )
    for line in nested_lines(samples, folders, noun):
        log(line)
    others = len(samples) - sum(counts.values())
    if others:
        log(f"{others} {noun}(s) outside any N_words folder: 1 repeat each (kohya's sd-scripts would not read them)")
    log(f"{plural(len(out), 'sample')} per epoch from {len(samples)} {noun}(s)")
    return out


def plural(count: int, word: str) -> str:
    """``1 repeat``, ``3 repeats``: a count with its noun in the right number (the log's words all take an s)."""
    return f"{count} {word}" if count == 1 else f"{count} {word}s"


def nested_lines(samples: Sequence[Any], folders: dict[str, tuple[int, str]], noun: str = "image") -> list[str]:
    """One line per ``N_words`` folder holding files in its sub-folders: they train with the folder's repeats and
    words, where kohya's sd-scripts (``glob_images(dir, "*")``, not recursive) reads only the folder itself."""
    nested: dict[str, dict[str, int]] = {}  # N_words folder -> sub-folder (relative key) -> files
    for sample in samples:
        top = folder_of(sample.key)
        if top in folders and sample.key.count("/") > 1:
            sub = sample.key.rsplit("/", 1)[0]
            nested.setdefault(top, {})[sub] = nested.get(top, {}).get(sub, 0) + 1
    lines = []
    for top, subs in nested.items():
        repeats, words = folders[top]
        shown = ", ".join(f"`{sub}/`" for sub in list(subs)[:5]) + (
            f" and {len(subs) - 5} more" if len(subs) > 5 else ""
        )
        said = f" and its words ({words!r})" if words else ""
        lines.append(
            f"{shown}: {sum(subs.values())} {noun}(s) in sub-folders train with `{top}/`'s "
            f"{plural(repeats, 'repeat')}{said} (kohya's sd-scripts read only the folder itself)"
        )
    return lines


def _identity(sample: Any) -> tuple:
    # What a copy shares with the sample it repeats (repeat_folder_samples changes `repeat` and, later, `index`).
    # A video-QA sample has no caption (its conversation is not repeated by kohya folders).
    return (
        sample.key,
        getattr(sample, "path", None),
        getattr(sample, "caption", None),
        getattr(sample, "refused", None),
    )


def copy_of(samples: Sequence[Any]) -> list[int]:
    """For each sample, the position in ``samples`` of the one it repeats: its own for a first copy (``repeat`` 0,
    or a copy whose first is not in ``samples``), the first's for a kohya repeat (``repeat`` > 0, same key, file and
    caption). Screening decodes each first once and hands its verdict to the copies."""
    firsts: dict[tuple, int] = {}
    out: list[int] = []
    for position, sample in enumerate(samples):
        identity = _identity(sample)
        if getattr(sample, "repeat", 0) > 0 and identity in firsts:
            out.append(firsts[identity])
        else:
            firsts.setdefault(identity, position)
            out.append(position)
    return out


def copies_note(count: int) -> str:
    """`` (listed 3 times: kohya N_words/ repeats)`` for a file listed ``count`` > 1 times, else ``""``."""
    return f" (listed {count} times: kohya N_words/ repeats)" if count > 1 else ""


def refuse_caption_extension_for_dataset(
    caption_extension: str, dataset_name: str, caption_column: str, noun: str
) -> None:
    """One paragraph when ``--caption_extension`` is set away from ``.txt`` for a ``--dataset_name`` run: a data set's
    captions are its column, so the option would be accepted and ignored.

    Raises:
        UserError: ``caption_extension`` is not the default.
    """
    if checked_caption_extension(caption_extension) != ".txt":
        raise UserError(
            f"--caption_extension {caption_extension} names the caption file beside each {noun} of "
            f"--train_data_dir, but the {noun}s come from --dataset_name {dataset_name!r}, whose captions are "
            f"its --caption_column {caption_column!r}. Leave --caption_extension unset, or pass the folder "
            f"of {noun}s and their caption files as --train_data_dir."
        )
