"""SimpleTuner's ``multidatabackend.json`` (its ``--data_backend_config``) read as a dataset config, as SimpleTuner
reads it (``simpletuner/helpers/data_backend/factory.py`` and ``prompts.py``, at bc8e6ab7, 2026-08-22).

The file is a JSON list of backends. An ``image`` or ``video`` backend (``dataset_type``, default ``image``) on a
local folder is one of dit-lora's sets: ``instance_data_dir`` its folder, ``id`` its name, ``caption_strategy``
its captions (``textfile``: the ``.txt`` beside each file; ``instanceprompt``: its ``instance_prompt`` for every
file), ``repeats`` its extra passes (SimpleTuner's 0 is seen once, so N is dit-lora's N + 1), ``resolution`` with
``resolution_type`` the area of its buckets (``pixel_area``, the default: a square's side; ``area``: megapixels;
``pixel``: the short side, said), ``crop_aspect: square`` with ``crop: true`` the square crop, ``max_num_samples``
its cap, and a video backend's ``video.num_frames`` its frames (the first ones of each clip, as SimpleTuner
truncates). A ``text_embeds`` backend is SimpleTuner's cache of caption embeddings: dit-lora caches them with the
latents, so it is left out and named. Every other key is named with its value and why it is left out; what would
train something else (a mask or control backend, parent-teacher regularisation, captions from file names or a
caption filter, a backend never sampled) is refused in one paragraph saying what to do.
"""

from __future__ import annotations

import math
from typing import Any

from dit_lora.config.peer_datasets import (
    Derived,
    ReadAs,
    captions_from_names,
    given,
    ignored_notes,
    multi_line_note,
    their_keys_of,
)
from dit_lora.core.errors import UserError

SIMPLETUNER = "SimpleTuner"

#: keys only SimpleTuner's backends use: one of them marks a JSON list as its file
MARKS = (
    "instance_data_dir",
    "caption_strategy",
    "dataset_type",
    "resolution_type",
    "cache_dir_vae",
    "crop_aspect",
    "type",
)
#: backends that hold no training data: SimpleTuner's caches of embeddings
EMBED_TYPES = ("text_embeds", "image_embeds", "conditioning_image_embeds", "distillation_cache")
#: the keys the translation reads (any other key is named as left out)
MAPPED = frozenset(
    {
        "id",
        "type",
        "dataset_type",
        "instance_data_dir",
        "instance_data_root",
        "dataset_name",
        "huggingface",
        "split",
        "image_column",
        "caption_strategy",
        "instance_prompt",
        "only_instance_prompt",
        "disable_multiline_split",
        "repeats",
        "resolution",
        "resolution_type",
        "crop",
        "crop_aspect",
        "max_num_samples",
        "video",
        "probability",
        "disabled",
        "disable",
        "is_regularisation_data",
        "is_regularization_data",
    }
)
#: what dit-lora leaves out of a backend, with why
IGNORED = {
    "cache_dir_vae": "one latent cache for the run, keyed by content: --cache_dir",
    "vae_cache_clear_each_epoch": "latents are cached once; an image keeps its crop every epoch",
    "vae_cache_ondemand": "latents are cached before training: --cache_latents false encodes them every step",
    "vae_cache_disable": "latents are cached before training: --cache_latents false encodes them every step",
    "skip_file_discovery": "the folder is listed at every start, and its cache entries found by content",
    "metadata_backend": "captions come from the caption files beside the files",
    "hash_filenames": "cache entries are named by content",
    "preserve_data_backend_cache": "the folder is listed at every start",
    "text_embeds": "caption embeddings are cached with the latents",
    "text_embed_cache": "caption embeddings are cached with the latents",
    "train_batch_size": "the batch size is the run's --train_batch_size",
    "start_epoch": "every set trains from the first step to the last",
    "start_step": "every set trains from the first step to the last",
    "end_epoch": "every set trains from the first step to the last",
    "end_step": "every set trains from the first step to the last",
    "timestep_sampling_offset": "the timestep draw is the run's",
    "caption_shuffle": "captions are not shuffled",
    "crop_style": "a crop window is random, fixed per image, or centred for the whole run: --center_crop",
    "crop_aspect_buckets": "images take the aspect-ratio bucket nearest their shape: --aspect_buckets auto",
    "minimum_image_size": "no image is left out for its size; every one is resized to cover its bucket",
    "maximum_image_size": "images are resized to cover their bucket, whatever their size",
    "target_downsample_size": "images are resized to cover their bucket, whatever their size",
    "minimum_aspect_ratio": "buckets reach 4:1 either way; wider images are cropped to the widest",
    "maximum_aspect_ratio": "buckets reach 4:1 either way; wider images are cropped to the widest",
    "prepend_instance_prompt": "dit-lora trains the captions as written: put the prompt into the caption files",
    "conditioning_data": "its conditioning backend is refused or named on its own",
    "aws_data_prefix": "only a local folder (`type: local`) or a Hub dataset is read",
}
#: the file's keys each translated option comes from (:func:`~.peer_datasets.their_keys_of`)
THEIR_KEYS: dict[str, tuple[str, ...]] = {
    "train_data_dir": ("instance_data_dir", "instance_data_root"),
    "name": ("id",),
    "max_train_samples": ("max_num_samples",),
}
#: SimpleTuner's ``--resolution_type`` when a backend gives none
DEFAULT_TYPE = "pixel_area"
#: SimpleTuner's ``--aspect_bucket_alignment``: an ``area`` backend's side is a multiple of it
ALIGNMENT = 64
#: the step of a translated side (a multiple of every family's stride but Sana's 32, which its own check names)
SIDE_STEP = 16


def is_theirs(data: Any) -> bool:
    """Whether ``data`` (a parsed JSON file) is a SimpleTuner backend list."""
    return (
        isinstance(data, list)
        and bool(data)
        and all(isinstance(b, dict) for b in data)
        and any("id" in b and set(b) & set(MARKS) for b in data)
    )


def backends(data: list[dict[str, Any]], path) -> tuple[list[tuple[str, dict[str, Any]]], list[str]]:
    """The backends that train (``(where, backend)``), and the notes naming those that do not (disabled ones, the
    caches of embeddings). A backend dit-lora cannot train as SimpleTuner would is refused in one paragraph."""
    sets, notes = [], []
    for i, backend in enumerate(data, 1):
        name = str(backend.get("id", f"#{i}"))
        where = f"backend `{name}` (entry {i} of {len(data)}) of `{path}`"
        kind = str(backend.get("dataset_type") or "image").strip().lower()
        if backend.get("conditioning_type"):
            kind = "conditioning"
        if backend.get("disabled") or backend.get("disable"):
            notes.append(f"backend `{name}` (`disabled: true`: SimpleTuner leaves it out too)")
        elif kind in EMBED_TYPES:
            notes.append(_embeds_note(name, kind, backend, where))
        elif kind in ("image", "video"):
            sets.append((where, backend))
        else:
            raise UserError(_not_trained(kind, backend, where))
    if not sets:
        raise UserError(
            f"`{path}` (SimpleTuner's backends) has no enabled `image` or `video` backend, so it names no data to "
            "train on. Enable one (`disabled: false`), or add one with `instance_data_dir`."
        )
    return sets, notes


def _embeds_note(name: str, kind: str, backend: dict[str, Any], where: str) -> str:
    """The left-out note of a backend of embeddings, its caption filter named apart (it changes what trains)."""
    shown = [k for k in backend if k not in ("id", "dataset_type", "caption_filter_list")]
    keys = ", ".join(f"`{given(k, backend[k], toml=False)}`" for k in shown)
    said = (
        f"backend `{name}` (`dataset_type: {kind}`; {keys}: caption embeddings are cached with the latents, "
        "--cache_dir)"
    )
    if backend.get("caption_filter_list"):  # a change of the captions, named as the peers' other ones are
        said += (
            f"; its `caption_filter_list: {backend['caption_filter_list']}` (SimpleTuner rewrites every caption "
            "through it before encoding; dit-lora trains the captions as written: apply it to the caption files)"
        )
    return said


def _not_trained(kind: str, backend: dict[str, Any], where: str) -> str:
    """The paragraph refusing a backend of a kind dit-lora does not train from this file."""
    if kind == "conditioning" and str(backend.get("conditioning_type", "")).lower() == "mask":
        return (
            f"{where} is a mask backend (`conditioning_type: mask`): SimpleTuner pairs each mask with the image of the "
            "same path in its own folder. dit-lora reads a mask beside its image, named `<image>_mask.png`, with "
            "--masked_loss: move the masks there under those names, remove this backend and the image backend's "
            "`conditioning_data`, and pass --masked_loss."
        )
    if kind == "conditioning":
        return (
            f"{where} is a conditioning backend (`conditioning_type: {backend.get('conditioning_type')}`): control "
            "images train only the edit families, from their own control folder options (docs/guides/qwenimage.md, "
            "flux.md). Remove it to train the images alone."
        )
    return (
        f"{where} is a `dataset_type: {kind}` backend, which dit-lora does not train from a dataset config. Remove "
        "it (or set `disabled: true`) to train the image and video backends."
    )


def translate(entry: dict[str, Any], *, video: bool, where: str) -> tuple[list[tuple[dict, dict, Derived]], list[str]]:
    """One image or video backend as dit-lora's set, with the file's names of its options and what they stand for,
    and the ``key (why)`` notes of what was left out."""
    _refuse(entry, where)
    out: dict[str, Any] = {"name": entry["id"]} if entry.get("id") else {}
    out.update(_source(entry, where))
    out.update(_captions(entry, where))
    extra = int(entry.get("repeats") or 0)
    if extra:
        out["repeats"] = extra + 1  # SimpleTuner's repeats are the passes after the first
    if entry.get("max_num_samples"):
        out["max_train_samples"] = entry["max_num_samples"]
    sizes, derived, notes = _sizes(entry, video=video)
    out.update(sizes)
    notes = ignored_notes(entry, IGNORED, MAPPED, where) + notes
    if out.get("caption_extension") and not entry.get("disable_multiline_split"):
        notes += multi_line_note(out.get("train_data_dir"), SIMPLETUNER)
    if extra:
        notes.append(ReadAs(f"`repeats: {extra}` as {extra + 1} passes: SimpleTuner counts those after the first"))
    probability = entry.get("probability", 1)
    if probability not in (1, 1.0):
        notes.append(
            f"`probability: {probability}` (SimpleTuner weighs it by the set's size too; dit-lora's sets take their "
            "share of the epoch's samples: `weight` in every set gives fixed shares)"
        )
    return [(out, their_keys_of(out, entry, THEIR_KEYS), derived)], notes


def _refuse(entry: dict[str, Any], where: str) -> None:
    """What would train something else than SimpleTuner trains: one paragraph each."""
    if entry.get("is_regularisation_data") or entry.get("is_regularization_data"):
        raise UserError(
            f"{where} is regularisation data (`is_regularisation_data: true`): SimpleTuner trains it towards the base "
            "model's own prediction. dit-lora's class images (prior preservation) train on their own latents with "
            "--prior_loss_weight: to do that, give `is_reg: true` in the backend instead; else remove it."
        )
    if entry.get("probability", 1) == 0:
        raise UserError(
            f"{where} gives `probability: 0`: SimpleTuner never samples it, and dit-lora would train it. Remove the "
            "backend (or set `disabled: true`)."
        )


def _source(entry: dict[str, Any], where: str) -> dict[str, Any]:
    """The backend's folder (``type: local``) or Hub dataset (``type: huggingface``: its name, split and columns,
    given beside the other keys or in its ``huggingface`` block, with SimpleTuner's defaults)."""
    kind = entry.get("type", "local")
    if kind == "huggingface":
        return _hub_source(entry, where)
    if kind != "local":
        raise UserError(
            f"{where} is a `type: {kind}` backend: dit-lora reads a local folder or a Hub dataset (`type: "
            "huggingface` with `dataset_name`). Download the data to a folder and point `instance_data_dir` at it."
        )
    folder = entry.get("instance_data_dir") or entry.get("instance_data_root")
    if isinstance(folder, str) and "{" in folder:
        raise UserError(
            f"{where} gives `instance_data_dir: {folder}` with a SimpleTuner placeholder, which dit-lora does not "
            "fill in. Write the folder's path."
        )
    return {"train_data_dir": folder} if folder else {}


def _hub_source(entry: dict[str, Any], where: str) -> dict[str, Any]:
    """A ``type: huggingface`` backend as a Hub dataset set (SimpleTuner's ``config/image.py`` and its metadata
    backend's defaults: split ``train``, columns ``image``, ``video`` and ``caption``)."""
    block = entry["huggingface"] if isinstance(entry.get("huggingface"), dict) else {}
    name = entry.get("dataset_name", block.get("dataset_name"))
    caption = block.get("caption_column", "caption")
    if not name or not isinstance(caption, str):
        raise UserError(
            f"{where} is a `type: huggingface` backend "
            + (
                "without `dataset_name`: name the Hub dataset."
                if not name
                else f"with several caption columns "
                f"({caption}): dit-lora reads one; keep one in `huggingface.caption_column`."
            )
        )
    return {
        "dataset_name": name,
        "dataset_split": entry.get("split", block.get("split", "train")),
        "image_column": entry.get("image_column", block.get("image_column", "image")),
        "caption_column": caption,
    }


def _captions(entry: dict[str, Any], where: str) -> dict[str, Any]:
    """The backend's captions: ``textfile``, ``instanceprompt`` (or ``only_instance_prompt``), a Hub dataset's
    caption column (``huggingface``, its default there); others refused."""
    prompt = entry.get("instance_prompt")
    if entry.get("only_instance_prompt") or entry.get("caption_strategy") == "instanceprompt":
        if not isinstance(prompt, str) or not prompt.strip():
            raise UserError(
                f"{where} captions every file with `instance_prompt`, which is "
                + ("a list (SimpleTuner draws one per step)" if isinstance(prompt, list) else "not given")
                + ": dit-lora gives every file of a set one caption. Give one `instance_prompt` string."
            )
        return {"instance_prompt": prompt}
    hub = entry.get("type") == "huggingface"
    strategy = entry.get("caption_strategy", "huggingface" if hub else "filename")
    if strategy == "huggingface" and hub:
        return {}  # the dataset's caption column (_hub_source)
    if strategy == "textfile":
        return {"caption_extension": ".txt"}
    if strategy == "filename":
        raise UserError(
            f"{where} captions each file with its name (`caption_strategy: filename`"
            + ("" if "caption_strategy" in entry else ", SimpleTuner's default when a backend gives none")
            + "), which dit-lora does not: it reads a caption file beside each file, or metadata.jsonl. Write them "
            f"from the names as SimpleTuner makes them (in the folder: `{captions_from_names(True)}`) and set "
            "`caption_strategy: textfile`."
        )
    raise UserError(
        f"{where} gives `caption_strategy: {strategy}`, whose captions dit-lora does not read: it reads a caption file "
        "beside each file (`textfile`), metadata.jsonl in the folder, or one `instance_prompt` (`instanceprompt`)."
    )


def _side(entry: dict[str, Any]) -> tuple[int, ReadAs | None]:
    """The side of the square whose area the backend's buckets take, and a note when SimpleTuner sizes otherwise."""
    value = entry["resolution"]
    kind = entry.get("resolution_type", DEFAULT_TYPE)
    if kind == "area":  # megapixels: SimpleTuner's square side, aligned
        side = max(ALIGNMENT, round(math.sqrt(float(value) * 1e6) / ALIGNMENT) * ALIGNMENT)
        return side, None
    side = max(SIDE_STEP, round(float(value) / SIDE_STEP) * SIDE_STEP)
    if kind == "pixel":
        return side, ReadAs(
            f"`resolution_type: pixel` as buckets of about {side} x {side} pixels, where SimpleTuner sizes each "
            f"image's short side to {value}"
        )
    return side, None


def _sizes(entry: dict[str, Any], *, video: bool) -> tuple[dict[str, Any], Derived, list[str]]:
    """The backend's sizes as dit-lora's options: an image backend's bucket area (and the square crop), a clip
    backend's side (fitted to the family: ``Derived.fit``) and frames, each clip's first (SimpleTuner truncates). A
    backend without ``resolution`` takes SimpleTuner's ``--resolution``, a run option: here the run's own size."""
    side, note = _side(entry) if "resolution" in entry else (None, None)
    notes: list[str] = [note] if note else []
    clip: dict[str, Any] = entry["video"] if isinstance(entry.get("video"), dict) else {}
    square = (
        {"aspect_buckets": "square"} if entry.get("crop") and entry.get("crop_aspect", "square") == "square" else {}
    )
    if not video:
        if clip:
            notes.append(f"`video: {clip}` (an image family reads no clips)")
        return ({} if side is None else {"resolution": side}) | square, Derived(), notes
    out: dict[str, Any] = {} if side is None else {"height": side, "width": side}
    implied = {}
    if clip.get("num_frames"):
        out["max_num_frames"] = int(clip["num_frames"])
        out["frame_sampling"] = "first"
        implied["frame_sampling"] = "SimpleTuner's first `num_frames` frames of each clip"
    for key in ("min_frames", "max_frames", "is_i2v", "bucket_strategy"):
        if key in clip and not (key == "min_frames" and clip[key] == clip.get("num_frames")):
            notes.append(f"`video.{key}: {clip[key]}` ({_CLIP_WHY[key]})")
    return out, Derived(implied=implied, fit={} if side is None else {"side": side}), notes


_CLIP_WHY = {
    "min_frames": "clips shorter than the run's frames are left out either way, and named",
    "max_frames": "no clip is left out for its length",
    "is_i2v": "the family's task decides image-to-video",
    "bucket_strategy": "clips take the run's frame count at the set's size",
}
