"""What a checkpoint records about its run's options and data, and what a resume may change.

Every checkpoint holds :data:`OPTIONS_FILE`: the resolved options (:func:`~dit_lora.output.report.config_dict`, after
the catalogue's defaults, as the summary records them), a fingerprint of the data set (:func:`data_fingerprint`) and
the history of options changed at earlier resumes. A resume compares them with its own:

- a change to an option declared ``resume="fixed"`` (:func:`~dit_lora.config.schema.resume_class`: the rank, alpha,
  batch, seed, model, resolution, the loss's own options...) or to the data set is refused in one paragraph listing
  each ``old -> new``, unless ``--allow_changed_options``;
- a change to a ``free`` option (the learning rate, the schedule's length, validation, logging...) is taken, listed
  in one line, and recorded with the step it changed at (``changed_options`` in the summary, a sentence in the card).

A checkpoint of an older dit-lora (no :data:`OPTIONS_FILE`) resumes with one line saying the options were not compared.
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Callable
from dataclasses import fields
from pathlib import Path
from typing import TYPE_CHECKING, Any

from dit_lora.config.schema import config_fields, resume_class
from dit_lora.core.errors import UserError
from dit_lora.core.fileio import write_json_atomic
from dit_lora.output.names import COMPLETE_MARKER
from dit_lora.output.report import config_dict

if TYPE_CHECKING:
    from dit_lora.config.schema import FamilyOptions, TrainConfig

OPTIONS_FILE = "run_options.json"
DATA_KEY = "data set"  # how a data set change is named among the options
# Options that name the resume itself: they differ at every resume and mean nothing about the training.
NOT_COMPARED = frozenset({"resume_from_checkpoint", "allow_changed_options"})


def data_fingerprint(samples: list) -> str:
    """A SHA-256 of the usable samples in their order: each one's key (its path in the data folder, or its dataset
    row), caption (a video-QA sample: its conversation), bucket and file size.

    Cheap: a ``stat`` per file, nothing read or decoded (a content hash would read every file again at each resume
    of an uncached run). The order is part of it because the saved data position is an index into it: another
    folder, an added, removed, renamed or re-captioned sample, or a file of another size changes it. A file edited
    in place to the same size is not seen.
    """
    digest = hashlib.sha256()
    for sample in samples:
        # an image or clip has a path, a caption and a bucket; a video-QA sample a video and its conversation
        path = getattr(sample, "path", None) or getattr(sample, "video", None)
        try:
            size = os.stat(path).st_size if path else None
        except OSError:
            size = None
        text = getattr(sample, "caption", None)
        if text is None:
            text = getattr(sample, "messages", None)
        bucket = getattr(sample, "bucket", None)
        row = [sample.key, text, list(bucket) if bucket else None, size]
        digest.update(json.dumps(row).encode("utf-8") + b"\n")
    return digest.hexdigest()


def options_record(cfg: TrainConfig, samples: list, history: list[dict]) -> dict[str, Any]:
    """What :data:`OPTIONS_FILE` holds: the resolved options, the data set's fingerprint and size, the history."""
    return {
        "options": _plain(config_dict(cfg)),
        "data_fingerprint": data_fingerprint(samples),
        "num_samples": len(samples),
        "changed_options": list(history),
    }


def write_options(folder: Path, record: dict) -> None:
    """Write :data:`OPTIONS_FILE` into a checkpoint's staging folder (before its manifest, which then covers it)."""
    write_json_atomic(Path(folder) / OPTIONS_FILE, record)


def read_options(checkpoint: Path) -> dict | None:
    """The checkpoint's :data:`OPTIONS_FILE`, or None for a checkpoint of an older dit-lora."""
    path = Path(checkpoint) / OPTIONS_FILE
    return json.loads(path.read_text()) if path.is_file() else None


def _plain(values: dict) -> dict:
    """JSON's view of the options (tuples as lists, paths as strings), so saved and current values compare alike."""
    return json.loads(json.dumps(values, default=str))


def option_classes(family_options: FamilyOptions) -> dict[str, str]:
    """``{option: "fixed" | "free"}`` for the common options and the run's family's; an unclassified one is fixed."""
    declared = list(config_fields()) + list(fields(type(family_options)))
    return {f.name: resume_class(f) or "fixed" for f in declared}


def compare(
    saved: dict, cfg: TrainConfig, fingerprint: str | None = None, num_samples: int | None = None
) -> tuple[list[dict], list[dict]]:
    """``(fixed, free)`` changes between the checkpoint's record and this run, each ``{"option", "old", "new"}``.

    An option the checkpoint does not know (added by a later dit-lora) is not compared. With ``fingerprint`` (this
    run's :func:`data_fingerprint`) a changed data set is a fixed change named :data:`DATA_KEY`.
    """
    old_values, new_values = saved.get("options", {}), _plain(config_dict(cfg))
    classes = option_classes(cfg.family_options)
    fixed: list[dict] = []
    free: list[dict] = []
    for name, new in new_values.items():
        if name in NOT_COMPARED or name not in old_values or old_values[name] == new:
            continue
        (fixed if classes.get(name, "fixed") == "fixed" else free).append(
            {"option": name, "old": old_values[name], "new": new}
        )
    if fingerprint is not None and saved.get("data_fingerprint") not in (None, fingerprint):
        fixed.append(
            {
                "option": DATA_KEY,
                "old": f"{saved.get('num_samples')} samples ({saved['data_fingerprint'][:12]})",
                "new": f"{num_samples} samples ({fingerprint[:12]})",
            }
        )
    return fixed, free


def _show(change: dict) -> str:
    return f"{change['option']} {change['old']} -> {change['new']}"


def refuse_or_allow(
    fixed: list[dict], checkpoint: Path, step: int, allow: bool, log: Callable[[str], None], what: str = "options"
) -> None:
    """Refuse ``fixed`` changes in one paragraph (a :class:`UserError`: exit 2), or with ``allow`` log them."""
    if not fixed:
        return
    listed = "; ".join(_show(c) for c in fixed)
    if allow:
        log(f"warning: --allow_changed_options: resuming {checkpoint.name} (step {step}) with changed {what}: {listed}")
        return
    raise UserError(
        f"Cannot resume from {checkpoint} (step {step}) with changed {what}: {listed}. These change what the saved "
        "adapter, optimizer state or data position mean (the LoRA scale, the batch, the data order, the loss), so the "
        "run would go on as a different run. Resume with the values the checkpoint was trained with (its "
        f"{OPTIONS_FILE} lists them), start a new run in another --output_dir, or add --allow_changed_options to "
        "resume anyway (the changes are then recorded in train_summary.json and the model card)."
    )


def check_options(checkpoint: Path | None, cfg: TrainConfig, log: Callable[[str], None]) -> None:
    """Before anything loads: refuse a resume whose fixed options changed (the data set is judged later, by
    :func:`check_data`, once it is listed). Logs one line for a checkpoint that records no options."""
    if checkpoint is None:
        return
    saved = read_options(checkpoint)
    if saved is None:
        log(
            f"{checkpoint.name} records no options (written by an older dit-lora): the options could not be "
            "compared with the ones it was trained with"
        )
        return
    fixed, _ = compare(saved, cfg)
    refuse_or_allow(fixed, checkpoint, _step(checkpoint), cfg.checkpoints.allow_changed_options, log)


def _step(checkpoint: Path) -> int:
    """The step a checkpoint was written at (its marker's)."""
    return int(json.loads((Path(checkpoint) / COMPLETE_MARKER).read_text())["step"])


def resume_history(checkpoint: Path, cfg: TrainConfig, samples: list, log: Callable[[str], None]) -> list[dict]:
    """At a resume, with the data listed: refuse a changed data set (unless ``--allow_changed_options``), log the
    free changes in one line, and return the history so far plus this resume's changes, each with ``step``."""
    saved = read_options(checkpoint)
    if saved is None:
        return []
    step = _step(checkpoint)
    fixed, free = compare(saved, cfg, data_fingerprint(samples), len(samples))
    data_changes = [c for c in fixed if c["option"] == DATA_KEY]
    refuse_or_allow(data_changes, checkpoint, step, cfg.checkpoints.allow_changed_options, log, what="data")
    if free:
        log(f"changed at step {step}: " + ", ".join(_show(c) for c in free))
    forced = [{**c, "forced": True} for c in fixed]
    return list(saved.get("changed_options", [])) + [{"step": step, **c} for c in free + forced]


__all__ = [
    "OPTIONS_FILE",
    "check_options",
    "compare",
    "data_fingerprint",
    "options_record",
    "read_options",
    "refuse_or_allow",
    "resume_history",
    "write_options",
]
