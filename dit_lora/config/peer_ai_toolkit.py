"""ai-toolkit's job file: its ``datasets`` read as dit-lora's sets, and the file given as a run config recognised and
refused with the counterparts of its main keys.

ai-toolkit nests a run in ``job:``/``config: {process: [...]}``; dit-lora's YAML is flat, one option per line. Its
first process's ``datasets:`` list is read by ``--dataset_config`` (through :mod:`.peer_datasets`): each dataset
translated into dit-lora's set options (:func:`translate_ai_toolkit`), what has no counterpart named. The run's own
keys map to dit-lora's options through :data:`.peers.PEER_FLAGS`, which the refusal quotes.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from dit_lora.config.peers import PEER_FLAGS
from dit_lora.core.errors import UserError

AI_TOOLKIT = "ai-toolkit"


def is_ai_toolkit(data: dict) -> bool:
    """An ai-toolkit job file: ``job:``/``config:`` at the top, ``config: {process: [...]}`` (no dit-lora option
    is called ``job``, ``config`` is a flag, never a YAML key)."""
    config = data.get("config")
    return ("job" in data or "config" in data) and isinstance(config, dict) and isinstance(config.get("process"), list)


#: ai-toolkit's main keys (their place in its nested file) and dit-lora's flat option, from :mod:`.peers`
_AI_TOOLKIT_KEYS = (
    "model.name_or_path",
    "datasets[].folder_path",
    "datasets[].caption_ext",
    "network.linear",
    "network.linear_alpha",
    "train.lr",
    "train.steps",
    "train.batch_size",
    "train.dtype",
    "save.save_every",
    "training_folder",
)


def ai_toolkit_message(path: Path) -> str:
    """The paragraph for an ai-toolkit job YAML given as a dit-lora ``--config``: the shape, the main keys'
    counterparts (:data:`.peers.PEER_FLAGS`), the migration page."""
    pairs = []
    for where in _AI_TOOLKIT_KEYS:
        peer = PEER_FLAGS.get(where.rsplit(".", 1)[-1])
        if peer is not None and peer.option:
            pairs.append(f"{where} -> `{peer.option}`")
    return (
        f"The config file `{path}` is an ai-toolkit config (top-level `job`/`config` with a `process` list): "
        "dit-lora's YAML is flat, one `option: value` per line at the top level, the same names as its --flags. "
        f"Rewrite it as such; its main keys map as {', '.join(pairs)}. Its `datasets:` are read as they are with "
        f"--dataset_config {path}. docs/guides/migrating.md lists every ai-toolkit key and its dit-lora option (or "
        "that there is none)."
    )


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


#: the keys ai-toolkit's translation reads (any other key is named as left out)
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


#: ai-toolkit's ``resolution`` when a dataset gives none (``DatasetConfig``)
AI_TOOLKIT_RESOLUTION = 512


#: the step of a clip's height and width until the family's own fits it (data_sets.fit_to_family)
VIDEO_STEP = 16


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


def job_notes(data: dict[str, Any]) -> list[str]:
    """What an ai-toolkit job gives its datasets from outside them that dit-lora leaves out: the process's
    ``trigger_word`` (ai-toolkit's for every dataset without its own)."""
    process = (data.get("config") or {}).get("process") if isinstance(data.get("config"), dict) else None
    first = process[0] if isinstance(process, list) and process and isinstance(process[0], dict) else {}
    word = first.get("trigger_word")
    return [trigger_note(word, " of the job's process")] if word else []


def trigger_note(word: Any, where: str) -> str:
    """The left-out note of ai-toolkit's ``trigger_word`` (a set's, or its job's for every set)."""
    return (
        f"`trigger_word: {word!r}`{where} (no counterpart: ai-toolkit writes it for `[trigger]` in the captions and "
        "puts it before every caption that lacks it; dit-lora trains the captions as they are written: write it into "
        "the caption files, or give every file one caption with `instance_prompt`)"
    )


def translate_ai_toolkit(entry: dict[str, Any], *, video: bool, sampling: bool = True) -> list[dict[str, Any]]:
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


def _video_side(size: Any) -> int:
    """ai-toolkit's ``resolution`` (the side of a square of the buckets' area) as a clip's side: a multiple of
    :data:`VIDEO_STEP`, rounded down so that no bucket holds more pixels than ai-toolkit's."""
    return max(VIDEO_STEP, int(size) // VIDEO_STEP * VIDEO_STEP)


def ai_toolkit_dropped(entry: dict[str, Any], *, video: bool) -> list[str]:
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
