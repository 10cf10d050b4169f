"""``dit-lora caption PATH --training_file NAME``: a folder's own captions as video-LLM training data.

A captioner LoRA learns the style of your captions when it is trained on the very question ``dit-lora caption``
asks: each file becomes one chat JSONL line (``{"video": file, "messages": [user: the caption prompt, assistant:
its caption]}``), the format the video-LLM families read (:mod:`dit_lora.families.videollm.data`), written inside
the folder so that every path stays in the data folder. Images are one-frame clips there as here.
"""

from __future__ import annotations

import json
from pathlib import Path

from dit_lora.captioning.media import list_media
from dit_lora.captioning.options import CaptionOptions
from dit_lora.captioning.writer import METADATA, CaptionStore, caption_path
from dit_lora.core.errors import UserError
from dit_lora.core.fileio import write_text_atomic
from dit_lora.core.progress import say

__all__ = ["write_training_file"]


def _target(root: Path, name: str) -> Path:
    target = (root / name).resolve()
    if target.parent != root.resolve() or target.suffix != ".jsonl":
        raise UserError(
            f"--training_file {name}: give a file name ending in .jsonl; it is written in {root} itself, so that the "
            "paths it lists stay inside the data folder training reads (e.g. --training_file captioner.jsonl)."
        )
    if target.exists():
        raise UserError(
            f"--training_file: {target} exists already; it is never overwritten. Delete it, or name another file."
        )
    return target


def write_training_file(options: CaptionOptions) -> tuple[Path, int, list[str]]:
    """Write the chat JSONL of ``options.path``'s captioned files; returns its path, the lines written and the
    files left out for having no caption. No caption at all is one paragraph."""
    root, media = list_media(options.path, say)
    if not root.is_dir() or options.path.is_file():
        raise UserError("--training_file reads a folder's captions: pass the folder, not one file.")
    target = _target(root, str(options.training_file))
    # the captions training would read: the root's metadata.jsonl when there is one (or --metadata), else the files
    metadata = options.metadata or (root / METADATA).is_file()
    store = CaptionStore(root, extension=options.caption_extension, metadata=metadata, options={}, check=False)
    lines, missing = [], []
    for item in media:
        text = _caption_of(store, item.key, item.path, options.caption_extension)
        if text is None or not text.strip():
            missing.append(item.key)
            continue
        messages = [{"role": "user", "content": options.prompt_for(item)}, {"role": "assistant", "content": text}]
        lines.append(json.dumps({"video": item.key, "messages": messages}))
    if not lines:
        where = METADATA if options.metadata else f"<name>{options.caption_extension} files"
        raise UserError(
            f"--training_file: no file of {root} has a caption ({where}). Write captions for a few files first (five "
            "good ones are enough to learn a style), then run this again."
        )
    write_text_atomic(target, "".join(line + "\n" for line in lines))
    return target, len(lines), missing


def _caption_of(store: CaptionStore, key: str, media: Path, extension: str) -> str | None:
    if store.metadata:
        rows = store.existing.get(key)
        text = rows[0].get("text") if rows else None
        if isinstance(text, str) and text.strip():
            return text
    # a metadata row without text falls back to the caption file, as training reads it
    path = caption_path(media, extension)
    try:
        return path.read_text(encoding="utf-8").strip() if path.is_file() else None
    except (OSError, UnicodeDecodeError) as err:
        raise UserError(f"--training_file: the caption {path} cannot be read as UTF-8 text ({err}). Mend it and rerun.")
