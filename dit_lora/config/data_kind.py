"""Whether a ``--train_data_dir`` holds video-LLM data, judged before any family is chosen.

A run without ``--family`` and without a model trains the default family (an image model), whose messages speak of
images ("a file, not a folder", "this run trains sana"). Data written for a video LLM (LLaMA-Factory's
``dataset_info.json`` folder or entries, a VideoChat2 or chat annotation file) then deserves its own paragraph:
what it is, and that the model (or a video-LLM ``--family``) picks who trains it. Only the first entry is read (at
most :data:`_PEEK` bytes), so a 100k-entry file costs nothing.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from dit_lora.config import owners

__all__ = ["video_llm_data", "video_llm_data_message"]

#: how much of a data file is read to see its first entry
_PEEK = 1 << 20


def _first_entry(file: Path) -> Any:
    """The first entry of a JSON list or JSONL file (None when it cannot be read from its first :data:`_PEEK`)."""
    try:
        with file.open(encoding="utf-8-sig", errors="replace") as handle:
            text = handle.read(_PEEK).lstrip()
    except OSError:
        return None
    try:
        if text.startswith("["):
            entry, _ = json.JSONDecoder().raw_decode(text[1:].lstrip())
            return entry
        line = next((line for line in text.splitlines() if line.strip()), "")
        return json.loads(line) if line else None
    except json.JSONDecodeError:
        return None


def video_llm_data(path: str | None) -> str | None:
    """What video-LLM data ``path`` holds, in words (``LLaMA-Factory's dataset_info.json``, ``LLaMA-Factory
    entries``, ``VideoChat2/chat annotations``), or None when it looks like none."""
    if not path:
        return None
    given = Path(path)
    if given.is_dir():
        return "LLaMA-Factory's dataset_info.json" if (given / "dataset_info.json").is_file() else None
    if given.name == "dataset_info.json":
        return "LLaMA-Factory's dataset_info.json"
    if not given.is_file() or given.suffix.lower() not in (".json", ".jsonl"):
        return None
    entry = _first_entry(given)
    if not isinstance(entry, dict):
        return None
    if "video" in entry and ("QA" in entry or "messages" in entry):
        return "VideoChat2/chat annotations (a clip per entry under `video`)"
    if any(key in entry for key in ("videos", "messages", "conversations")) or {"instruction", "output"} <= set(entry):
        return "LLaMA-Factory entries (sharegpt or alpaca)"
    return None


def video_llm_data_message(path: str | None, flag: str = "--train_data_dir") -> str | None:
    """The one paragraph for video-LLM data given to a run whose family is not known (no --family, no model), or
    None when ``path`` does not look like video-LLM data."""
    what = video_llm_data(path)
    if what is None:
        return None
    families = ", ".join(owners.owners("dataset_info_name")) or "the video LLMs"
    return (
        f"{flag} {path} holds video-LLM data ({what}), which the video-LLM families train ({families}), but no "
        "model and no --family says which one. Pass --pretrained_model_name_or_path with the video LLM's folder (its "
        "family is read from it), or --family NAME with one of them (dit-lora's default family trains images)."
    )
