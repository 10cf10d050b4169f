"""musubi-tuner's (and kohya's sd-scripts') dataset TOML: ``image_directory``/``video_directory`` sets (kohya's
``[[datasets.subsets]]`` each a set), translated into dit-lora's set options; what their frame extraction and
buckets ask that dit-lora does otherwise is said, never silently dropped. Read through :mod:`.peer_datasets`.
"""

from __future__ import annotations

import math
from typing import Any

from dit_lora.core.errors import UserError

MUSUBI = "musubi-tuner"

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


#: the keys musubi-tuner's translation reads (any other key is named as left out)
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


#: musubi-tuner's ``frame_extraction`` values: each takes runs of consecutive frames (its docs' diagrams)
EXTRACTIONS = ("head", "chunk", "slide", "uniform", "full")


#: musubi-tuner's ``max_frames`` when a set gives none (``VideoDatasetParams``)
MUSUBI_MAX_FRAMES = 129


def expand_subsets(entry: dict[str, Any]) -> list[dict[str, Any]]:
    """kohya's sd-scripts nest folders as ``[[datasets.subsets]]``: each subset, with its dataset's keys, is a set."""
    subsets = entry.get("subsets")
    if not isinstance(subsets, list) or not subsets:
        return [entry]
    shared = {k: v for k, v in entry.items() if k != "subsets"}
    return [{**shared, **sub} for sub in subsets if isinstance(sub, dict)]


def translate_musubi(entry: dict[str, Any], *, video: bool, where: str, sampling: bool = True) -> dict[str, Any]:
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


def musubi_dropped(entry: dict[str, Any], *, video: bool, where: str) -> list[str]:
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
