"""diffusion-pipe's ``dataset.toml`` read as a dataset config, as diffusion-pipe reads it (``utils/dataset.py``,
``models/base.py``, ``examples/dataset.toml``; tdrussell/diffusion-pipe 8f83dbf2, 2026-08-20).

Each ``[[directory]]`` is one of dit-lora's sets, the file's top-level keys its defaults (a directory's own win, as
there): ``path`` its folder, ``num_repeats`` its repeats, ``resolutions`` the area of its buckets (a side ``N`` or a
``[W, H]`` pair, whose area is all diffusion-pipe takes of it; several are one set each, as diffusion-pipe trains the
data once per resolution), ``enable_ar_bucket`` aspect buckets (off, its default: every image cropped square),
``frame_buckets`` a video family's frame buckets (each clip in the longest it fills, as there), ``size_buckets`` exact
sizes. Captions are the ``.txt`` beside each file, read as diffusion-pipe reads them. Every other key is named with its
value and why it is left out; what would train something else (masks in a folder of their own, control images,
captions from ``captions.json``, a fraction of a directory per epoch) is refused in one paragraph.
"""

from __future__ import annotations

import math
import os
from typing import Any

from dit_lora.config.peer_datasets import Derived, ReadAs, ignored_notes, their_keys_of
from dit_lora.core.errors import UserError

DIFFUSION_PIPE = "diffusion-pipe"

#: the top-level keys that hold for the whole file, not a directory's defaults
FILE_KEYS = ("directory", "subsample_ratio")
#: the keys the translation reads (any other key is named as left out)
MAPPED = frozenset(
    {
        "path",
        "num_repeats",
        "resolutions",
        "enable_ar_bucket",
        "frame_buckets",
        "size_buckets",
        "skip_empty_caption",
        "name",
    }
)
#: what dit-lora leaves out of a directory, with why
IGNORED = {
    "min_ar": "buckets step by the model's stride up to 4:1 either way",
    "max_ar": "buckets step by the model's stride up to 4:1 either way",
    "num_ar_buckets": "buckets step by the model's stride up to 4:1 either way",
    "ar_buckets": "images take the aspect-ratio bucket nearest their shape, in the model's stride",
    "caption_prefix": "dit-lora trains the captions as written: put the prefix into the caption files",
    "cache_shuffle_num": "captions are not shuffled",
    "cache_shuffle_delimiter": "captions are not shuffled",
    "shuffle_tags": "captions are not shuffled",
    "shuffle_metadata": "the batch order is the run's, seeded by --seed",
    "online_captions": "captions are read from the caption files",
}
#: keys that would train something else: refused, with what to do
REFUSED = {
    "mask_path": "diffusion-pipe reads each image's mask from a folder of its own; dit-lora reads a mask beside its "
    "image, named `<image>_mask.png`, with --masked_loss: move the masks there under those names, and remove `mask_path`",
    "default_mask_file": "dit-lora has no mask for images without one: give each image its `<image>_mask.png` beside "
    "it (--masked_loss), and remove `default_mask_file`",
    "control_path": "control images train only the edit families, from their own control folder options",
}
#: the file's keys each translated option comes from (:func:`~.peer_datasets.their_keys_of`)
THEIR_KEYS: dict[str, tuple[str, ...]] = {"train_data_dir": ("path",), "repeats": ("num_repeats",)}
#: the step diffusion-pipe rounds a bucket's sides to (``pixels_round_to_multiple``, 16 for most models)
STEP = 16


def is_theirs(data: Any) -> bool:
    """Whether ``data`` (a parsed TOML file) is diffusion-pipe's: ``[[directory]]`` tables with a ``path``."""
    listed = data.get("directory") if isinstance(data, dict) else None
    return isinstance(listed, list) and bool(listed) and all(isinstance(d, dict) and "path" in d for d in listed)


def directories(data: dict[str, Any], path) -> tuple[list[tuple[str, dict[str, Any]]], list[str]]:
    """Each directory with the file's defaults merged in (``(where, directory)``), and the notes of the file's own
    keys left out."""
    defaults = {k: v for k, v in data.items() if k not in FILE_KEYS}
    listed = data["directory"]
    sets = [
        (f"[[directory]] {i} of {len(listed)} (`path = {d.get('path')!r}`) of `{path}`", {**defaults, **d})
        for i, d in enumerate(listed, 1)
    ]
    ratio = data.get("subsample_ratio")
    notes = [f"`subsample_ratio = {ratio}` (every sample of the sets trains each epoch)"] if ratio is not None else []
    return sets, notes


def translate(entry: dict[str, Any], *, video: bool, where: str) -> tuple[list[tuple[dict, dict, Derived]], list[str]]:
    """One directory as dit-lora's set(s), one per resolution, with the file's names of its options and the notes of
    what was left out."""
    refused = [k for k in REFUSED if entry.get(k)]
    if refused:
        raise UserError(f"{where} gives `{refused[0]}`: {REFUSED[refused[0]]}.")
    _refuse_captions_json(entry, where)
    out: dict[str, Any] = {"train_data_dir": entry["path"]}
    if entry.get("name"):
        out["name"] = entry["name"]
    repeats = entry.get("num_repeats", 1)
    if not float(repeats).is_integer() or float(repeats) < 1:
        raise UserError(
            f"{where} gives `num_repeats = {repeats}`: diffusion-pipe trains that share of its samples per epoch; "
            "dit-lora repeats a set's samples a whole number of times. Give a whole `num_repeats` of 1 or more; for a "
            "share of the batches instead, give every directory `num_repeats = 1` and a `weight` (the probability a "
            "batch comes from it)."
        )
    if int(repeats) != 1:
        out["repeats"] = int(repeats)
    notes = ignored_notes(entry, IGNORED, MAPPED, where, toml=True) + _subfolders(entry["path"])
    if entry.get("skip_empty_caption") is False:
        notes.append(
            "`skip_empty_caption = false` (diffusion-pipe trains a file without a caption on the empty caption; "
            "dit-lora names such files and stops: write their captions, or give the set one `instance_prompt`)"
        )
    sized = _sized(entry, video=video, where=where, notes=notes)
    keys = their_keys_of(out, entry, THEIR_KEYS)
    return [({**out, **sizes}, keys, derived) for sizes, derived in sized], notes


def _refuse_captions_json(entry: dict[str, Any], where: str) -> None:
    """A folder with ``captions.json``: diffusion-pipe takes its captions from it and no ``.txt`` file."""
    folder = entry.get("path")
    if isinstance(folder, str) and os.path.isfile(os.path.join(folder, "captions.json")):
        raise UserError(
            f"{where}: `{folder}` holds captions.json, from which diffusion-pipe takes every caption (its .txt files "
            "are then not read); dit-lora reads metadata.jsonl or a caption file beside each file. Write captions.json "
            'as metadata.jsonl (one `{"file_name": ..., "text": ...}` a line, the first caption of each) and move '
            "captions.json out of the folder."
        )


def _subfolders(folder: Any) -> list[str]:
    """The note for subfolders diffusion-pipe does not read (its own ``cache`` folder aside)."""
    if not isinstance(folder, str) or not os.path.isdir(folder):
        return []
    subs = sorted(e.name for e in os.scandir(folder) if e.is_dir() and e.name != "cache" and e.name[0] != ".")
    if not subs:
        return []
    return [
        f"subfolders of `{folder}` ({', '.join(subs[:3])}{', ...' if len(subs) > 3 else ''}: diffusion-pipe reads only "
        "the folder's own files; dit-lora reads its subfolders too, so move them out to leave them out)"
    ]


def _side(resolution: Any) -> int:
    """A resolution's side: ``N``, or ``[W, H]``'s area as a square's, in diffusion-pipe's step."""
    if isinstance(resolution, list):
        width, height = (float(v) for v in resolution)
        resolution = math.sqrt(width * height)
    return max(STEP, round(float(resolution) / STEP) * STEP)


def _sized(entry: dict[str, Any], *, video: bool, where: str, notes: list[str]) -> list[tuple[dict[str, Any], Derived]]:
    """The directory's sizes as dit-lora's options, one set per resolution (or one of exact sizes)."""
    if entry.get("size_buckets"):
        return [_size_buckets(entry["size_buckets"], video=video, where=where)]
    resolutions = entry.get("resolutions")
    if not isinstance(resolutions, list) or not resolutions:
        raise UserError(f"{where} has no `resolutions` (nor a top-level one), which diffusion-pipe needs too: add one.")
    # bucket 1 is diffusion-pipe's images: dit-lora gives a set's images one-frame buckets of their own, and a bucket
    # of 1 among the clips' would take the clips too short for the others, which diffusion-pipe leaves out
    frames = sorted({int(f) for f in entry.get("frame_buckets", [1]) if int(f) > 1})
    if frames and not video:
        notes.append(f"`frame_buckets = {entry['frame_buckets']}` (an image family reads no clips)")
    if entry.get("enable_ar_bucket") and frames and video:
        notes.append(
            ReadAs(
                "`enable_ar_bucket = true` for clips as frame buckets of one size each (every clip resized to cover "
                "it and centre-cropped; diffusion-pipe buckets clips by aspect ratio)"
            )
        )
    if video and frames:
        notes.append(
            ReadAs(
                "`frame_buckets` of clips at their own frame rate (diffusion-pipe resamples them to the model's "
                "first), their first frames (diffusion-pipe's default `video_clip_mode`)"
            )
        )
    out = []
    sides = list(dict.fromkeys(_side(r) for r in resolutions))  # one set per area, as diffusion-pipe de-duplicates
    for side in sides:
        sizes: dict[str, Any]
        if video and frames:
            sizes = {"frame_buckets": ",".join(f"{f}x{side}x{side}" for f in frames), "frame_sampling": "first"}
        elif video:
            sizes = {"height": side, "width": side}
        else:
            sizes = {"resolution": side, **({} if entry.get("enable_ar_bucket") else {"aspect_buckets": "square"})}
        if len(sides) > 1:
            sizes["name"] = f"{entry.get('name') or os.path.basename(str(entry['path']).rstrip('/'))}@{side}"
        out.append((sizes, _first_frames(sizes)))
    return out


def _first_frames(sizes: dict[str, Any]) -> Derived:
    """A clip set's first frames are diffusion-pipe's default (``video_clip_mode``, a key of its training TOML): an
    explicit --frame_sampling takes their place."""
    if "frame_sampling" not in sizes:
        return Derived()
    return Derived(implied={"frame_sampling": "diffusion-pipe's default `video_clip_mode = 'single_beginning'`"})


def _size_buckets(buckets: Any, *, video: bool, where: str) -> tuple[dict[str, Any], Derived]:
    """``size_buckets = [[W, H, frames], ...]``: a video family's frame buckets, or an image family's one size."""
    sizes = [(int(w), int(h), int(f)) for w, h, f in buckets]
    if video:
        clips = {"frame_buckets": ",".join(f"{f}x{h}x{w}" for w, h, f in sizes if f > 1), "frame_sampling": "first"}
        return clips, _first_frames(clips)
    stills = sorted({(w, h) for w, h, f in sizes if f == 1})
    if len(stills) != 1:
        raise UserError(
            f"{where} gives `size_buckets` of {len(stills)} image sizes: dit-lora trains an image set at one fixed "
            "size or in its aspect buckets. Keep one `[W, H, 1]`, or give `resolutions` and `enable_ar_bucket = true`."
        )
    ((width, height),) = stills
    return {"aspect_buckets": f"{width}x{height}", "resolution": max(width, height)}, Derived()
