"""Other trainers' dataset files read as a dataset config (:mod:`.dataset_config`): musubi-tuner's (and kohya's
sd-scripts') TOML with ``image_directory``/``video_directory`` sets, and an ai-toolkit job YAML's ``datasets:``.

Each set's keys that map are translated into dit-lora's data options (:func:`translate`); what has no counterpart
is left out and named, with why, in one paragraph the run and ``check-data`` print (never silently); what would
train something else than the file asks (a control folder, regularization images, another metadata format) is
refused. The mapping is the migration guide's table (docs/guides/migrating.md).
"""

from __future__ import annotations

import difflib
import json
import math
import os
import tomllib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from dit_lora.core.errors import UserError

MUSUBI = "musubi-tuner"
AI_TOOLKIT = "ai-toolkit"

#: keys only musubi-tuner's (and sd-scripts') dataset TOML uses: one of them marks a file as theirs
MUSUBI_MARKS = (
    "image_directory",
    "video_directory",
    "image_jsonl_file",
    "video_jsonl_file",
    "num_repeats",
    "target_frames",
    "frame_extraction",
    "enable_bucket",
    "cache_directory",
    "image_dir",
    "subsets",
)

#: what dit-lora leaves out of a musubi-tuner set, with why
MUSUBI_IGNORED = {
    "batch_size": "the batch size is the run's --train_batch_size",
    "bucket_no_upscale": "images and clips are resized to cover their bucket: no no-upscale mode",
    "cache_directory": "one latent cache for the run, keyed by content: --cache_dir",
    "source_fps": "clips are read at their own frame rate; musubi-tuner drops frames to reach the model's",
    "target_fps": "clips are read at their own frame rate; musubi-tuner drops frames to reach it",
    "class_tokens": "a file without a caption is left out and named; instance_prompt captions every file",
    "flip_aug": "flips hold for the whole run: --random_flip",
    "keep_tokens": "captions are not shuffled",
    "shuffle_caption": "captions are not shuffled",
}

#: what dit-lora leaves out of an ai-toolkit dataset, with why
AI_TOOLKIT_IGNORED = {
    "default_caption": "a file without a caption is left out and named; instance_prompt captions every file",
    "shuffle_tokens": "captions are not shuffled",
    "keep_tokens": "captions are not shuffled",
    "token_dropout_rate": "captions are read whole: no dropout of their comma-separated tokens",
    "caption_dropout_rate": "caption dropout holds for the whole run: --caption_dropout_probability",
    "flip_x": "flips hold for the whole run: --random_flip",
    "flip_y": "no vertical flips",
    "cache_latents": "latents are cached to disk by default: --cache_latents",
    "cache_latents_to_disk": "latents are cached to disk by default: --cache_latents",
    "cache_text_embeddings": "caption embeddings are cached with the latents",
    "buckets": "images take aspect-ratio buckets by default: --aspect_buckets auto",
    "bucket_tolerance": "buckets step by the model's stride",
    "network_weight": "the adapter trains at its one strength",
    "num_workers": "the run's --dataloader_num_workers",
    "fps": "clips are read at their own frame rate",
    "do_i2v": "the family's task decides image-to-video",
    "do_t2v": "the family's task decides image-to-video",
    "do_audio": "a family with audio reads the clip's own track",
    "mask_path": "masks are read beside the images with --masked_loss, a `_mask` file per image",
}

#: keys that would train something else than the set asks: refused, with what to do
REFUSED = {
    "image_jsonl_file": "musubi-tuner's metadata JSONL (`image_path`/`video_path` and `caption` per line) is not "
    "read: write a metadata.jsonl with `file_name` and `text` in the folder, or keep a caption file beside each file",
    "video_jsonl_file": "musubi-tuner's metadata JSONL (`image_path`/`video_path` and `caption` per line) is not "
    "read: write a metadata.jsonl with `file_name` and `text` in the folder, or keep a caption file beside each file",
    "control_directory": "control images train only the edit families, from their own control folder options",
    "control_path": "control images train only the edit families, from their own control folder options",
}


def flavour_of(data: dict[str, Any], sets: list[dict[str, Any]], toml: bool) -> str | None:
    """Whose file this is: :data:`AI_TOOLKIT` (a job YAML), :data:`MUSUBI` (a TOML with their keys), or None
    (dit-lora's own)."""
    if "job" in data or isinstance(data.get("config"), dict):
        return AI_TOOLKIT
    general: dict[str, Any] = data["general"] if isinstance(data.get("general"), dict) else {}
    keys = {str(k) for s in sets for k in s} | {str(k) for k in general}
    return MUSUBI if toml and keys & set(MUSUBI_MARKS) else None


def ai_toolkit_sets(data: dict[str, Any], path) -> list[dict[str, Any]]:
    """The ``datasets`` list of an ai-toolkit job YAML's first process."""
    process = (data.get("config") or {}).get("process") if isinstance(data.get("config"), dict) else None
    first = process[0] if isinstance(process, list) and process and isinstance(process[0], dict) else {}
    sets = first.get("datasets")
    if not isinstance(sets, list) or not sets:
        raise UserError(
            f"`{path}` looks like an ai-toolkit job file (`job`/`config` at its top) but its `config.process[0]` "
            "has no `datasets` list, which is what a dataset config reads of it. Point --dataset_config at a job "
            "file with datasets, or write a dit-lora `datasets:` list."
        )
    return sets


def expand_subsets(entry: dict[str, Any]) -> list[dict[str, Any]]:
    """kohya's sd-scripts nest folders as ``[[datasets.subsets]]``: each subset, with its dataset's keys, is a set."""
    subsets = entry.get("subsets")
    if not isinstance(subsets, list) or not subsets:
        return [entry]
    shared = {k: v for k, v in entry.items() if k != "subsets"}
    return [{**shared, **sub} for sub in subsets if isinstance(sub, dict)]


#: the file's keys each translated option comes from with the same value (the first the set gives), by flavour:
#: what messages call the option (an option whose value differs from its source's, as `frame_buckets` from
#: `target_frames`, keeps its own name: a set of that file may give it too)
THEIR_KEYS: dict[str, dict[str, tuple[str, ...]]] = {
    MUSUBI: {"train_data_dir": ("image_directory", "video_directory", "image_dir"), "repeats": ("num_repeats",)},
    AI_TOOLKIT: {
        "train_data_dir": ("folder_path",),
        "repeats": ("num_repeats",),
        "loss_weight": ("loss_multiplier",),
        "caption_extension": ("caption_ext",),
        "max_num_frames": ("num_frames",),
    },
}


def their_keys(translated: dict[str, Any], entry: dict[str, Any], flavour: str) -> dict[str, str]:
    """Each option of ``translated`` that the ``flavour`` set ``entry`` gives under another name: that name."""
    return their_keys_of(translated, entry, THEIR_KEYS[flavour])


def their_keys_of(
    translated: dict[str, Any], entry: dict[str, Any], table: dict[str, tuple[str, ...]]
) -> dict[str, str]:
    """Each option of ``translated`` that ``entry`` gives under another name of ``table`` (option -> the file's keys
    it comes from, the first the set gives): that name, what the set's messages call the option."""
    out = {}
    for option in translated:
        found = [key for key in table.get(option, ()) if key in entry]
        if found and found[0] != option:
            out[option] = found[0]
    return out


@dataclass(frozen=True)
class Derived:
    """What a translated set's options stand for in another trainer's file, beyond their names (the
    :class:`~.dataset_file.DataSet` keeps it)."""

    #: options the file does not give, set to what its trainer does by default, each with those words: an explicit
    #: run option (a flag or a --config key) takes their place (:func:`~dit_lora.data.data_sets.set_config`)
    implied: dict[str, str] = field(default_factory=dict)
    #: options the file gives under a key of another value, each with the file's words (``frame_extraction =
    #: 'chunk'``): an explicit run option of another value is refused
    origin: dict[str, str] = field(default_factory=dict)
    #: sizes that follow the family's rules, fitted once the family is known
    #: (:func:`~dit_lora.data.data_sets.fit_to_family`): ``side`` (ai-toolkit's ``resolution`` of a clip set), or
    #: ``full_frames``, ``height`` and ``width`` (musubi-tuner's ``frame_extraction = 'full'``)
    fit: dict[str, int] = field(default_factory=dict)


def _derived(translated: dict[str, Any], entry: dict[str, Any], flavour: str) -> Derived:
    """The :class:`Derived` of one translated set of ``entry``."""
    implied, origin, fit = {}, {}, {}
    if "frame_sampling" in translated:
        key = "frame_extraction" if flavour == MUSUBI else "shrink_video_to_frames"
        if key in entry:
            origin["frame_sampling"] = f"`{key} = {entry[key]!r}`" if flavour == MUSUBI else f"`{key}: true`"
        elif flavour == MUSUBI:
            implied["frame_sampling"] = "musubi-tuner's default `frame_extraction = 'head'`"
        else:
            implied["frame_sampling"] = "ai-toolkit's default `shrink_video_to_frames: true`"
    if flavour == MUSUBI and entry.get("frame_extraction") == "full" and "frame_buckets" in translated:
        width, height = (int(v) for v in entry["resolution"])
        fit = {"full_frames": int(entry.get("max_frames", MUSUBI_MAX_FRAMES)), "height": height, "width": width}
    elif flavour == AI_TOOLKIT and "height" in translated and "side" in translated:
        fit = {"side": int(translated.pop("side"))}
    return Derived(implied, origin, fit)


def translate(
    entry: dict[str, Any], flavour: str, *, video: bool, where: str, own: frozenset[str] = frozenset()
) -> tuple[list[tuple[dict, dict, Derived]], list[str]]:
    """One set of a ``flavour`` file as dit-lora's set(s) (an ai-toolkit list of resolutions is one set per
    resolution, as ai-toolkit splits it), each with the file's names of its options (:func:`their_keys`) and what
    they stand for (:class:`Derived`), and the ``key (why)`` notes of what was left out. A key in ``own`` (dit-lora's own set keys, e.g. ``weight`` added to a
    musubi-tuner file) passes through as it is; one that a translated key also sets is refused. A refused key set
    to false or null is its default, nothing to refuse."""
    refused = [k for k in entry if k in REFUSED and entry[k]]
    if refused:
        raise UserError(f"{where} gives `{refused[0]}`: {REFUSED[refused[0]]}.")
    entry = {k: v for k, v in entry.items() if not (k in REFUSED or k == "is_reg") or v}
    mapped = MUSUBI_MAPPED if flavour == MUSUBI else AI_TOOLKIT_MAPPED
    kept = {k: v for k, v in entry.items() if k in own and k not in mapped}
    theirs = {k: v for k, v in entry.items() if k not in kept}
    try:
        if flavour == MUSUBI:
            sets = [_musubi(theirs, video=video, where=where, sampling="frame_sampling" not in kept)]
            notes = ignored_notes(theirs, MUSUBI_IGNORED, MUSUBI_MAPPED, where, toml=True)
            notes += _musubi_dropped(theirs, video=video, where=where)
        else:
            sets = _ai_toolkit(theirs, video=video, sampling="frame_sampling" not in kept)
            notes = ignored_notes(theirs, AI_TOOLKIT_IGNORED, AI_TOOLKIT_MAPPED, where)
            notes += _ai_toolkit_dropped(theirs, video=video)
    except (TypeError, ValueError):
        raise UserError(
            f"{where}: a size or frame count of this {flavour} set is not a whole number ({theirs!r}); fix the value."
        ) from None
    named = []
    for translated in sets:
        clash = sorted(set(translated) & set(kept))
        if clash:
            raise UserError(f"{where} gives `{clash[0]}` and also {flavour}'s key that means it; keep one of the two.")
        derived = _derived(translated, theirs, flavour)
        named.append((translated, their_keys(translated, theirs, flavour), derived))
        translated.update(kept)
    return named, notes


#: musubi-tuner's ``frame_extraction`` values: each takes runs of consecutive frames (its docs' diagrams)
EXTRACTIONS = ("head", "chunk", "slide", "uniform", "full")
#: musubi-tuner's ``max_frames`` when a set gives none (``VideoDatasetParams``)
MUSUBI_MAX_FRAMES = 129


def _extraction(entry: dict[str, Any], where: str) -> str:
    """The set's ``frame_extraction`` (musubi-tuner's default ``head``; ``uniform`` of one sample is ``head`` there
    too), refused in one paragraph when it is none of :data:`EXTRACTIONS`."""
    extraction = entry.get("frame_extraction", "head")
    if extraction not in EXTRACTIONS:
        raise UserError(
            f"{where} gives `frame_extraction = {extraction!r}`, which musubi-tuner does not take: give one of "
            f"{', '.join(repr(e) for e in EXTRACTIONS)}."
        )
    if extraction == "uniform" and int(entry.get("frame_sample", 1)) == 1:
        return "head"  # musubi-tuner's own rule: one uniform sample is the head
    return str(extraction)


def _musubi_dropped(entry: dict[str, Any], *, video: bool, where: str) -> list[str]:
    """What a musubi-tuner set asks that its translation cannot give (said, never silently dropped)."""
    frame_keys = ("target_frames", "frame_extraction", "frame_stride", "frame_sample", "max_frames")
    if not video:
        return [f"`{k}` (an image family reads no clips)" for k in frame_keys if k in entry]
    notes = _musubi_bucket_notes(entry)
    extraction = _extraction(entry, where) if "video_directory" in entry or "frame_extraction" in entry else "head"
    one = "dit-lora trains one run per clip, its first frames, at the clip's own speed: --frame_sampling first"
    if extraction == "chunk":
        notes.append(f"`frame_extraction = 'chunk'` (musubi-tuner trains every run of N consecutive frames; {one})")
    elif extraction == "slide":
        stride = entry.get("frame_stride", 1)
        notes.append(
            f"`frame_extraction = 'slide'` with `frame_stride = {stride}` (musubi-tuner trains a run of N consecutive "
            f"frames starting every {stride} frame(s); {one})"
        )
    elif extraction == "uniform":
        count = entry.get("frame_sample")
        notes.append(
            f"`frame_extraction = 'uniform'` with `frame_sample = {count}` (musubi-tuner trains {count} runs of N "
            f"consecutive frames spread over each clip; {one})"
        )
    if extraction == "full":
        if not isinstance(entry.get("resolution"), list):
            notes.append("`frame_extraction = 'full'` (its frame buckets need `resolution = [W, H]`)")
    elif "target_frames" in entry and not isinstance(entry.get("resolution"), list):
        notes.append("`target_frames` (frame buckets need a video family and `resolution = [W, H]`)")
    elif "video_directory" in entry and "target_frames" not in entry:
        notes.append(
            "`video_directory` without `target_frames` (musubi-tuner's default [1] trains one frame of each clip; "
            "here its clips train at the run's frame count, --max_num_frames)"
        )
    elif isinstance(entry.get("target_frames"), list) and len(entry["target_frames"]) > 1:
        notes.append(
            "`target_frames` with several counts (they are frame buckets: each clip trains once, in the bucket of the "
            "most frames it fills; musubi-tuner takes a sample of each count from every clip)"
        )
    return notes


def _musubi_bucket_notes(entry: dict[str, Any]) -> list[str]:
    """What ``enable_bucket`` asks of a clip set that dit-lora's video buckets do otherwise (said, never silent)."""
    if not isinstance(entry.get("resolution"), list):
        return []
    width, height = entry["resolution"]
    framed = "target_frames" in entry or entry.get("frame_extraction") == "full"
    if framed and entry.get("enable_bucket"):
        return [
            f"`enable_bucket = true` beside `target_frames` (frame buckets have one size each: every clip is resized "
            f"to cover {width} x {height} and centre-cropped; musubi-tuner buckets clips by aspect ratio)"
        ]
    if not framed and not entry.get("enable_bucket"):
        return [
            f"`enable_bucket = false` (images and clips take aspect buckets of about {width} x {height} pixels; "
            f'musubi-tuner crops every one to that size: `frame_buckets = "FRAMESx{height}x{width}"` in the set does)'
        ]
    return []


#: the keys each flavour's translation reads (any other key is named as left out)
MUSUBI_MAPPED = frozenset(
    {
        "image_directory",
        "video_directory",
        "image_dir",
        "caption_extension",
        "name",
        "num_repeats",
        "resolution",
        "target_frames",
        "enable_bucket",
        "frame_extraction",
        "frame_stride",
        "frame_sample",
        "max_frames",
        "is_reg",
    }
)
AI_TOOLKIT_MAPPED = frozenset(
    {
        "folder_path",
        "num_repeats",
        "loss_multiplier",
        "name",
        "is_reg",
        "caption_ext",
        "num_frames",
        "resolution",
        "shrink_video_to_frames",
        "trigger_word",
    }
)


def ignored_notes(
    entry: dict[str, Any], table: dict[str, str], mapped: frozenset[str], where: str, *, toml: bool = False
) -> list[str]:
    """```key: value` (why)`` (TOML: ``key = value``) for each key of ``entry`` the translation leaves out: those of
    ``table`` with their reason, any other unmapped one as having no counterpart; a key a letter or two from one the
    translation reads is a typo, refused naming it (left out, it would train without what it meant)."""
    unknown = [k for k in entry if k not in mapped and k not in table]
    for key in unknown:
        close = difflib.get_close_matches(key, sorted(mapped), n=1, cutoff=0.8)
        if close:
            raise UserError(f"{where} has the key `{key}`: did you mean `{close[0]}`? Fix the key.")
    return [
        f"`{given(k, v, toml=toml)}` ({table.get(k, 'no counterpart in dit-lora')})"
        for k, v in entry.items()
        if k not in mapped or k in table
    ]


def given(key: str, value: Any, *, toml: bool) -> str:
    """``key`` with ``value`` as the user's file writes it: ``key = value`` in TOML, ``key: value`` in YAML or JSON
    (true, false and null as those write them)."""
    if toml or isinstance(value, bool) or value is None:
        shown = json.dumps(value, default=str)
    else:
        shown = str(value)
    return f"{key} = {shown}" if toml else f"{key}: {shown}"


def _musubi(entry: dict[str, Any], *, video: bool, where: str, sampling: bool = True) -> dict[str, Any]:
    """A musubi-tuner set as dit-lora's set options; ``sampling=False``: the set gives its own ``frame_sampling``
    (then only an explicit ``frame_extraction`` sets it, which the caller refuses beside it)."""
    out: dict[str, Any] = {}
    for key in ("image_directory", "video_directory", "image_dir"):
        if entry.get(key):
            out["train_data_dir"] = entry[key]
    for key in ("caption_extension", "name", "is_reg"):
        if key in entry:
            out[key] = entry[key]
    if "num_repeats" in entry:
        out["repeats"] = entry["num_repeats"]
    out.update(_musubi_sizes(entry, video=video, where=where))
    clips = video and ("video_directory" in entry or "frame_extraction" in entry)
    if clips and (sampling or "frame_extraction" in entry):
        # every extraction takes runs of consecutive frames (the clip's own speed): dit-lora's `first`
        out["frame_sampling"] = "first"
    return out


def _musubi_sizes(entry: dict[str, Any], *, video: bool, where: str) -> dict[str, Any]:
    """A musubi-tuner set's ``resolution = [W, H]`` (and, for clips, ``target_frames`` or ``full`` extraction's
    lengths) as dit-lora's size options."""
    out: dict[str, Any] = {}
    size = entry.get("resolution")
    if not isinstance(size, list):
        return {} if size is None else {"resolution": size}
    if len(size) != 2:
        raise UserError(f"{where}: musubi-tuner's `resolution` is `[width, height]`, got {size!r}.")
    width, height = (int(v) for v in size)
    full = video and entry.get("frame_extraction") == "full"
    if full:  # every clip at its own length up to max_frames, a bucket per length: 4k+1 until the family's frame
        # rule fits them (Derived.fit; data_sets.fit_to_family)
        most = int(entry.get("max_frames", MUSUBI_MAX_FRAMES))
        out["frame_buckets"] = ",".join(f"{f}x{height}x{width}" for f in range(1, most + 1, 4))
    elif video and "target_frames" in entry:  # the buckets carry frames and size
        frames = entry["target_frames"]
        frames = frames if isinstance(frames, list) else [frames]
        out["frame_buckets"] = ",".join(f"{int(f)}x{height}x{width}" for f in frames)
    elif video:
        out["width"], out["height"] = width, height
    elif entry.get("enable_bucket"):  # buckets of about width x height pixels
        out["resolution"] = width if width == height else 16 * round(math.sqrt(width * height) / 16)
    else:  # every image cropped to that size
        out["aspect_buckets"] = f"{width}x{height}"
        out["resolution"] = max(width, height)
    return out


def trigger_note(word: Any, where: str) -> str:
    """The left-out note of ai-toolkit's ``trigger_word`` (a set's, or its job's for every set)."""
    return (
        f"`trigger_word: {word!r}`{where} (no counterpart: ai-toolkit writes it for `[trigger]` in the captions and "
        "puts it before every caption that lacks it; dit-lora trains the captions as they are written: write it into "
        "the caption files, or give every file one caption with `instance_prompt`)"
    )


def job_notes(data: dict[str, Any]) -> list[str]:
    """What an ai-toolkit job gives its datasets from outside them that dit-lora leaves out: the process's
    ``trigger_word`` (ai-toolkit's for every dataset without its own)."""
    process = (data.get("config") or {}).get("process") if isinstance(data.get("config"), dict) else None
    first = process[0] if isinstance(process, list) and process and isinstance(process[0], dict) else {}
    word = first.get("trigger_word")
    return [trigger_note(word, " of the job's process")] if word else []


def _ai_toolkit_dropped(entry: dict[str, Any], *, video: bool) -> list[str]:
    """What an ai-toolkit dataset asks that its translation cannot give (said, never silently dropped)."""
    notes = [trigger_note(entry["trigger_word"], "")] if entry.get("trigger_word") else []
    frames = entry.get("num_frames")
    if frames is not None and not video:
        notes.append(f"`num_frames: {frames}` (an image family reads no clips)")
    elif video and frames is not None and int(frames) <= 1:
        notes.append(
            f"`num_frames: {frames}` (clips train at the run's frame count, --max_num_frames; images are one-frame "
            "clips either way)"
        )
    if video and entry.get("shrink_video_to_frames") is False:
        notes.append(
            "`shrink_video_to_frames: false` (ai-toolkit then takes the frames at its `fps`; dit-lora spreads "
            "`num_frames` over the whole clip: `frame_sampling: first` in the set takes consecutive frames instead)"
        )
    return notes  # a clip's side off the family's size step is said by its set's header (data_sets.fit_to_family)


#: ai-toolkit's ``resolution`` when a dataset gives none (``DatasetConfig``)
AI_TOOLKIT_RESOLUTION = 512
#: the step of a clip's height and width until the family's own fits it (data_sets.fit_to_family)
VIDEO_STEP = 16


def _video_side(size: Any) -> int:
    """ai-toolkit's ``resolution`` (the side of a square of the buckets' area) as a clip's side: a multiple of
    :data:`VIDEO_STEP`, rounded down so that no bucket holds more pixels than ai-toolkit's."""
    return max(VIDEO_STEP, int(size) // VIDEO_STEP * VIDEO_STEP)


def _ai_toolkit(entry: dict[str, Any], *, video: bool, sampling: bool = True) -> list[dict[str, Any]]:
    """An ai-toolkit dataset as dit-lora's set(s); ``sampling=False``: the set gives its own ``frame_sampling``."""
    out: dict[str, Any] = {}
    for theirs, ours in (
        ("folder_path", "train_data_dir"),
        ("num_repeats", "repeats"),
        ("loss_multiplier", "loss_weight"),
        ("name", "name"),
        ("is_reg", "is_reg"),
    ):
        if theirs in entry:
            out[ours] = entry[theirs]
    ext = entry.get("caption_ext")
    if ext:
        out["caption_extension"] = ext if str(ext).startswith(".") else f".{ext}"
    frames = entry.get("num_frames")
    if video and frames is not None and int(frames) > 1:
        out["max_num_frames"] = int(frames)
        if sampling and entry.get("shrink_video_to_frames", True):  # ai-toolkit's default: spread over the clip
            out["frame_sampling"] = "uniform"
    sizes = entry.get("resolution", AI_TOOLKIT_RESOLUTION)
    sizes = sizes if isinstance(sizes, list) else [sizes]

    def sized(size: Any) -> dict[str, Any]:  # a clip set: buckets of about size x size pixels, as images take
        return (
            {"height": _video_side(size), "width": _video_side(size), "side": int(size)}
            if video
            else {"resolution": size}
        )

    if len(sizes) == 1:
        return [{**out, **sized(sizes[0])}]
    base = out.get("name") or str(out.get("train_data_dir", "set")).rstrip("/").rsplit("/", 1)[-1]
    return [{**out, **sized(size), "name": f"{base}@{size}"} for size in sizes]


def toml_config_message(path: Path, text: str, *, suffix_only: bool) -> str | None:
    """The paragraph for a TOML file given as the run's ``--config`` (a YAML file), or None when ``text`` is not
    TOML (``suffix_only``: judged by its ``.toml`` suffix alone, else by whether it parses as TOML): a dataset
    config (musubi-tuner's or kohya's ``[[datasets]]``, or dit-lora's own) is read with --dataset_config."""
    named_toml = path.suffix.lower() == ".toml"
    if suffix_only and not named_toml:
        return None
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as err:
        if not named_toml:
            return None
        yaml_named = yaml_named_toml(path, text, err, "--config")
        if yaml_named:
            return yaml_named
        data = {}  # a broken TOML file is still no YAML run config
    if isinstance(data.get("directory"), list):  # diffusion-pipe's dataset.toml
        return (
            f"The config file `{path}` (from --config) is diffusion-pipe's dataset.toml (`[[directory]]` tables), not "
            f"a run config: pass it as --dataset_config {path} (each directory is read as a set, what has no "
            "counterpart named), with the run's options as flags or in a YAML --config."
        )
    if isinstance(data.get("datasets"), list):
        return (
            f"The config file `{path}` (from --config) is a TOML dataset config (`[[datasets]]` tables, as "
            "musubi-tuner and kohya's sd-scripts write them), not a run config: --config reads dit-lora's YAML, one "
            f"`option: value` per line. Pass it as --dataset_config {path} (its sets are read as they are, what has no "
            "counterpart named), with the run's options as flags or in a YAML --config; docs/guides/migrating.md maps "
            "musubi-tuner's flags."
        )
    return (
        f"The config file `{path}` (from --config) is TOML; --config reads dit-lora's YAML run config, one `option: "
        "value` per line, the same names as its --flags. Rewrite it as YAML; a TOML list of data sets "
        f"(`[[datasets]]`) is read with --dataset_config {path}."
    )


def yaml_named_toml(path: Path, text: str, err: Exception, flag: str) -> str | None:
    """The paragraph for a file named ``.toml`` that is no TOML (``err``) but a YAML mapping: it was written as YAML
    and named otherwise (files are read by their suffix), or None when it is no YAML either."""
    import yaml

    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError:
        return None
    if not isinstance(data, dict):
        return None
    return (
        f"`{path}` (from {flag}) is named .toml but holds YAML: it is no TOML ({err}), and it reads as a YAML mapping "
        f"(`{next(iter(data), '')}: ...`). Files are read by their suffix: rename it to `{path.with_suffix('.yaml')}` "
        f"and pass that to {flag}"
        + (", or write it in TOML." if flag != "--config" else " (--config reads YAML only).")
    )


def captions_from_names(underscores: bool) -> str:
    """A shell line writing each image's or clip's file name as its caption file, in every subfolder, never over a
    caption file that exists (``underscores``: ``_`` read as spaces, as SimpleTuner's ``filename`` captions)."""
    tr = " | tr _ ' '" if underscores else ""
    return (
        "find . -type f \\( -iname '*.png' -o -iname '*.jp*g' -o -iname '*.webp' -o -iname '*.mp4' \\) | "
        f'while read -r f; do t="${{f%.*}}.txt"; [ -e "$t" ] || basename "${{f%.*}}"{tr} > "$t"; done'
    )


def multi_line_captions(folder: Any, extension: str = ".txt") -> list[str]:
    """The caption files (``extension``) under ``folder`` holding several non-empty lines, relative to it: dit-lora
    reads such a file whole, where SimpleTuner and OneTrainer take each line as a caption of its own."""
    found: list[str] = []
    if not isinstance(folder, str) or not os.path.isdir(folder):
        return found
    for dirpath, dirnames, filenames in os.walk(folder):
        dirnames[:] = sorted(d for d in dirnames if not d.startswith("."))
        for name in sorted(f for f in filenames if f.lower().endswith(extension)):
            try:
                with open(os.path.join(dirpath, name), encoding="utf-8", errors="replace") as handle:
                    lines = [line for line in handle.read().splitlines() if line.strip()]
            except OSError:
                continue  # the listing names an unreadable file
            if len(lines) > 1:
                found.append(os.path.relpath(os.path.join(dirpath, name), folder))
    return found


def multi_line_note(folder: Any, trainer: str) -> list[str]:
    """The :class:`ReadAs` note on ``folder``'s caption files of several lines (none: no note)."""
    files = multi_line_captions(folder)
    if not files:
        return []
    shown = ", ".join(files[:3]) + (f" and {len(files) - 3} more" if len(files) > 3 else "")
    return [
        ReadAs(
            f"{len(files)} caption file(s) of several lines ({shown}) read whole, each one caption: {trainer} takes "
            "each line as a caption of its own and draws one"
        )
    ]


class ReadAs(str):
    """A note on a key that was read otherwise than its name says (SimpleTuner's ``repeats: 1`` is two passes), said
    before what was left out."""


def ignored_paragraph(path, flavour: str, notes: list[str]) -> str | None:
    """The one paragraph naming how the run reads a ``flavour`` file: the keys read otherwise than their name says
    (:class:`ReadAs`), then what it leaves out; None when there is nothing to say."""
    only = (
        " Only the job's `datasets` are read: its model, network, train and sample sections are the run's options "
        "(flags or --config)."
        if flavour == AI_TOOLKIT
        else ""
    )
    read_as = [n for n in dict.fromkeys(notes) if isinstance(n, ReadAs)]
    left_out = [n for n in dict.fromkeys(notes) if not isinstance(n, ReadAs)]
    if not notes and not only:
        return None
    how = f" ({'; '.join(read_as)})" if read_as else ""
    left = f"; left out: {'; '.join(left_out)}" if left_out else ""
    return (
        f"dataset config `{path}` ({flavour}'s): read as dit-lora's sets{how}{left}.{only} See "
        "docs/guides/migrating.md for the mapping."
    )
