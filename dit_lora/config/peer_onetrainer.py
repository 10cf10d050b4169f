"""OneTrainer's concepts (``training_concepts/concepts.json``, or the ``concepts`` list of an exported training
config) read as a dataset config, as OneTrainer reads them (``modules/util/config/ConceptConfig.py``, its mgds data
pipeline; OneTrainer 23df3832, mgds 3a6994ad).

A concept is one of dit-lora's sets: ``path`` its folder, ``name`` its name, ``loss_weight`` its loss weight, a
whole ``balancing`` (``REPEATS``, the default) its repeats, ``text.prompt_source`` its captions (``sample``: the
``.txt`` beside each image; ``concept``: the one prompt of ``text.prompt_path`` for every image), and
``image.resolution_override`` (when enabled) its size. OneTrainer writes every key of a concept, most at their
defaults, which do nothing there either: a left-out key is named only when its value is not OneTrainer's default.
A disabled concept, and a ``VALIDATION`` one (OneTrainer's validation loss: --validation_data_dir here), are left
out and named. What would train something else (prior prediction, a fraction of a concept per epoch, captions from
file names, one of several prompts drawn per image) is refused in one paragraph saying what to do.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from dit_lora.config.peer_datasets import Derived, captions_from_names, multi_line_note, their_keys_of
from dit_lora.core.errors import UserError

ONETRAINER = "OneTrainer"

#: keys of a concept: one of them beside ``path`` marks a JSON list as OneTrainer's
MARKS = ("image", "text", "balancing", "balancing_strategy", "include_subdirectories", "image_variations", "__version")
#: OneTrainer's defaults of the keys the translation leaves out (ConceptConfig, ConceptImageConfig,
#: ConceptTextConfig): a key at its default does nothing there either, and is not named
DEFAULTS: dict[str, Any] = {
    "image_variations": 1,
    "text_variations": 1,
    "include_subdirectories": False,
    "enabled": True,
    "type": "STANDARD",
    "balancing_strategy": "REPEATS",
    "image.enable_crop_jitter": True,
    "image.enable_random_flip": False,
    "image.enable_fixed_flip": False,
    "image.enable_resolution_override": False,
    "text.prompt_source": "sample",
    "text.enable_tag_shuffling": False,
    "text.tag_dropout_enable": False,
    "text.caps_randomize_enable": False,
    "text.caps_randomize_lowercase": False,
}
#: keys that do nothing to what trains (labels, caches, a UI's statistics)
QUIET = frozenset({"__version", "seed", "concept_stats", "name", "path", "loss_weight", "balancing", "enabled"})
#: the concept's keys the translation reads or weighs (any other is OneTrainer's unknown key, ignored there too)
MAPPED = frozenset({*(k for k in DEFAULTS if "." not in k), *QUIET, "image", "text", "validation_concept", "repeats"})
#: what each left-out key (at another value than its default) does in OneTrainer and why dit-lora does not
WHY = {
    "image_variations": "latents are cached once per image",
    "text_variations": "caption embeddings are cached once per caption",
    "image.enable_crop_jitter": "the crop is centred for the whole run: --center_crop true",
    "image.enable_random_flip": "flips hold for the whole run: --random_flip",
    "image.enable_fixed_flip": "no image is flipped in every epoch",
    "text.enable_tag_shuffling": "captions are not shuffled",
    "text.tag_dropout_enable": "captions are read whole: no dropout of their tags",
    "text.caps_randomize_enable": "captions are trained as written",
    "text.caps_randomize_lowercase": "captions are trained as written",
}
#: the file's keys each translated option comes from (:func:`~.peer_datasets.their_keys_of`)
THEIR_KEYS: dict[str, tuple[str, ...]] = {"train_data_dir": ("path",), "repeats": ("balancing",)}


def is_theirs(data: Any) -> bool:
    """Whether ``data`` (a parsed JSON file) is OneTrainer's: a concept list, or a training config with concepts."""
    if isinstance(data, dict) and ("concepts" in data or "concept_file_name" in data):
        return True
    return (
        isinstance(data, list)
        and bool(data)
        and all(isinstance(c, dict) for c in data)
        and any("path" in c and set(c) & set(MARKS) for c in data)
    )


def concepts(data: Any, path) -> tuple[list[tuple[str, dict[str, Any]]], list[str]]:
    """The concepts that train (``(where, concept)``), and the notes naming those left out (disabled, validation).
    A training config whose concepts are in another file is one paragraph naming it."""
    listed = data.get("concepts") if isinstance(data, dict) else data
    if isinstance(data, dict) and not isinstance(listed, list):
        named = data.get("concept_file_name") or "training_concepts/concepts.json"
        raise UserError(
            f"`{path}` is a OneTrainer training config whose concepts are in another file (`concept_file_name: "
            f"{named}`, relative to OneTrainer's folder). Pass that file as --dataset_config."
        )
    listed = listed if isinstance(listed, list) else []
    sets, notes = [], []
    for i, concept in enumerate(listed, 1):
        name = concept.get("name") or concept.get("path") or f"#{i}"
        where = f"concept `{name}` (entry {i} of {len(listed)}) of `{path}`"
        kind = _kind(concept)
        if concept.get("enabled") is False:
            notes.append(f"concept `{name}` (`enabled: false`: OneTrainer leaves it out too)")
        elif kind == "VALIDATION":
            notes.append(
                f"concept `{name}` (`type: VALIDATION`: OneTrainer's validation loss; dit-lora's held-out loss reads "
                f"--validation_data_dir {concept.get('path')})"
            )
        elif kind == "PRIOR_PREDICTION":
            raise UserError(
                f"{where} is `type: PRIOR_PREDICTION`: OneTrainer trains it towards the base model's own prediction. "
                "dit-lora's class images (prior preservation) train on their own latents with --prior_loss_weight: "
                "give `is_reg: true` in the concept for that, or remove it."
            )
        else:
            sets.append((where, concept))
    if not sets:
        raise UserError(f"`{path}` (OneTrainer's concepts) has no enabled training concept: enable one.")
    return sets, notes


def _kind(concept: dict[str, Any]) -> str:
    """The concept's type, the legacy ``validation_concept`` read as OneTrainer migrates it."""
    if "type" in concept:
        return str(concept["type"]).upper()
    return "VALIDATION" if concept.get("validation_concept") else "STANDARD"


def _flat(concept: dict[str, Any]) -> dict[str, Any]:
    """The concept's keys, its ``image`` and ``text`` ones as ``image.x`` and ``text.x``."""
    flat = {k: v for k, v in concept.items() if k not in ("image", "text")}
    for part in ("image", "text"):
        if isinstance(concept.get(part), dict):
            flat.update({f"{part}.{k}": v for k, v in concept[part].items() if k != "__version"})
    return flat


def translate(entry: dict[str, Any], *, video: bool, where: str) -> tuple[list[tuple[dict, dict, Derived]], list[str]]:
    """One concept as dit-lora's set, with the file's names of its options and the notes of what was left out."""
    flat = _flat(entry)
    out: dict[str, Any] = {"train_data_dir": entry.get("path")}
    if entry.get("name"):
        out["name"] = entry["name"]
    if entry.get("loss_weight", 1.0) != 1.0:
        out["loss_weight"] = entry["loss_weight"]
    repeats = _repeats(entry, where)
    if repeats != 1:
        out["repeats"] = repeats
    out.update(_captions(flat, where))
    out.update(_size(flat, where))
    _refuse_label_files(entry.get("path"), where)
    notes = [_note(k, v) for k, v in flat.items() if _left_out(k, v)]
    if out.get("caption_extension"):
        notes += multi_line_note(entry.get("path"), ONETRAINER)
    notes += [
        f"`{k}: {v}` (not a OneTrainer key: OneTrainer ignores it too)" for k, v in entry.items() if k not in MAPPED
    ]
    if flat.get("include_subdirectories") is False or "include_subdirectories" not in flat:
        notes += _subfolders(entry.get("path"))
    return [(out, their_keys_of(out, entry, THEIR_KEYS), Derived())], notes


def _left_out(key: str, value: Any) -> bool:
    """Whether a key is named as left out: not read, not quiet, at another value than OneTrainer's default (the
    strength or list of an augmentation that is off does nothing there either)."""
    handled = (
        "text.prompt_source",
        "text.prompt_path",
        "image.enable_resolution_override",
        "image.resolution_override",
        "include_subdirectories",  # read as dit-lora reads folders; when false, its subfolders are named (_subfolders)
    )
    if key in QUIET or key in handled or key in ("type", "validation_concept", "balancing_strategy", "repeats"):
        return False
    if key in DEFAULTS:
        return value != DEFAULTS[key]
    if key.startswith("image.enable_") or key.startswith("text.") and key.endswith("_enable"):
        return bool(value)
    return False  # an augmentation's strength, a tag option: named with its switch when that is on


def _note(key: str, value: Any) -> str:
    return f"`{key}: {value}` ({WHY.get(key, 'no counterpart in dit-lora')})"


def _subfolders(folder: Any) -> list[str]:
    """The note for a folder with subfolders OneTrainer does not read (``include_subdirectories: false``)."""
    if not isinstance(folder, str) or not os.path.isdir(folder):
        return []
    subs = sorted(e.name for e in os.scandir(folder) if e.is_dir() and not e.name.startswith("."))
    if not subs:
        return []
    return [
        f"`include_subdirectories: false` with subfolders in `{folder}` ({', '.join(subs[:3])}"
        f"{', ...' if len(subs) > 3 else ''}: OneTrainer reads only the folder's own images; dit-lora reads its "
        "subfolders too, so move them out to leave them out)"
    ]


#: the file names OneTrainer reads as an image's mask or conditioning image, never as an image of the concept
LABELS = {"-masklabel": "mask", "-condlabel": "conditioning image"}


def _refuse_label_files(folder: Any, where: str) -> None:
    """OneTrainer's ``<image>-masklabel.png`` masks and ``-condlabel`` conditioning images: dit-lora would list them as
    images of the set. One paragraph naming the first and what to do."""
    if not isinstance(folder, str) or not os.path.isdir(folder):
        return
    for dirpath, _, filenames in os.walk(folder):
        for name in sorted(filenames):
            label = next((kind for suffix, kind in LABELS.items() if Path(name).stem.endswith(suffix)), None)
            if label is None:
                continue
            image = Path(name).stem[: -len("-masklabel")] if label == "mask" else None
            fix = (
                f"dit-lora reads an image's mask beside it as `<image>_mask.png` with --masked_loss: rename them "
                f"(`{name}` -> `{image}_mask.png`)"
                if image is not None
                else "dit-lora has no conditioning image for this family: move them out of the folder"
            )
            raise UserError(
                f"{where}: `{os.path.relpath(os.path.join(dirpath, name), folder)}` is OneTrainer's {label} of an "
                f"image, which dit-lora would train as an image of its own. {fix}."
            )


def _repeats(entry: dict[str, Any], where: str) -> int:
    """A whole ``balancing`` of ``REPEATS`` (``repeats`` before OneTrainer's version 1) as repeats."""
    strategy = str(entry.get("balancing_strategy", "REPEATS")).upper()
    balancing = entry.get("balancing", entry.get("repeats", 1.0))
    if strategy == "REPEATS" and float(balancing) >= 1 and float(balancing).is_integer():
        return int(balancing)
    what = (
        f"`balancing: {balancing}` with `balancing_strategy: SAMPLES`, which trains {balancing} of its images "
        "each epoch"
        if strategy == "SAMPLES"
        else f"`balancing: {balancing}`, which trains {balancing} times its images each epoch"
    )
    raise UserError(
        f"{where} gives {what}, walked on across epochs; dit-lora repeats a set's images a whole number of times. "
        "Give a whole `balancing` of 1 or more (REPEATS); for a share of the batches instead, give every concept "
        "`balancing: 1` and a `weight` (the probability a batch comes from it)."
    )


def _captions(flat: dict[str, Any], where: str) -> dict[str, Any]:
    """``sample`` (the ``.txt`` beside each image) or ``concept`` (its prompt file's one prompt)."""
    source = flat.get("text.prompt_source", "sample")
    if source == "sample":
        return {"caption_extension": ".txt"}
    if source == "concept":
        prompts = _prompts(flat.get("text.prompt_path"), where)
        if len(prompts) != 1:
            raise UserError(
                f"{where} draws each image's caption from `text.prompt_path: {flat.get('text.prompt_path')}`, which "
                f"holds {len(prompts)} prompt(s) (OneTrainer picks one line at random per image); dit-lora gives every "
                "image of a set one caption. Keep one line in it, or write a caption file beside each image."
            )
        return {"instance_prompt": prompts[0]}
    raise UserError(
        f"{where} captions each image with its file name (`text.prompt_source: {source}`), which dit-lora does not: "
        "it reads a caption file beside each image, or metadata.jsonl. Write them from the names (in the folder: "
        f"`{captions_from_names(False)}`) and set `prompt_source: sample`."
    )


def _prompts(path: Any, where: str) -> list[str]:
    """The non-empty lines of a concept's prompt file, as OneTrainer reads them."""
    try:
        lines = Path(str(path)).read_text(encoding="utf-8").splitlines()
    except (OSError, UnicodeDecodeError) as err:
        raise UserError(f"{where}: its prompt file `text.prompt_path: {path}` cannot be read ({err}).") from None
    return [line.strip() for line in lines if line.strip()]


def _size(flat: dict[str, Any], where: str) -> dict[str, Any]:
    """``image.resolution_override`` when enabled: a side (``"512"``) or one fixed size (``"768x512"``)."""
    if not flat.get("image.enable_resolution_override"):
        return {}
    value = str(flat.get("image.resolution_override", "")).strip()
    if value.isdigit():
        return {"resolution": int(value)}
    if "x" in value and "," not in value:
        width, height = value.split("x", 1)
        if width.strip().isdigit() and height.strip().isdigit():
            return {"aspect_buckets": f"{int(width)}x{int(height)}", "resolution": max(int(width), int(height))}
    raise UserError(
        f"{where} gives `image.resolution_override: {value!r}`: OneTrainer draws one of several sizes per image; "
        "dit-lora trains a set at one size. Give one size (`512`, or `768x512`)."
    )
