"""The plan's step traces kept between runs (``$HF_HOME/dit-lora/plans`` or ``~/.cache/dit-lora/plans``).

Tracing a step on fake tensors is most of a plan: seconds for a tiny model, minutes of host CPU for a deep one, paid
again by every run start, every resume after a preemption and every ``dit-lora plan``. A trace depends only on what
builds the traced model and its batches, so it is kept, as JSON, under a key of exactly that:

* every option except those that never reach a trace (:data:`NOT_TRACED`: folders, logging, schedules, the
  optimizer's scalars, validation, checkpoints, the Hub, the guard), and the family's own options;
* the model: a local folder's every file but its weights (by content, so two copies of a folder share), else the
  Hub id, the revision and the commit of the snapshot the Hub cache holds;
* the family, the depths and settings traced (a trace runs on fake tensors: the device is not in it);
* this dit-lora's own source (every ``.py`` and ``.json`` file of the package) and the versions of torch, diffusers,
  transformers and peft.

An entry also records each config file the trace read (through the plan's reader) and its content; a lookup reads
them again and uses the entry only if all are unchanged. Anything unreadable (a read-only or full disk, a damaged
entry) is a miss: the cache is never a reason for a run to stop. ``DIT_LORA_PLAN_CACHE=0`` turns it off.
"""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import json
import os
from collections.abc import Callable
from importlib import metadata
from pathlib import Path
from typing import Any

from dit_lora.core.fileio import atomic_write
from dit_lora.data.cache import default_cache_root

#: bump when an entry's layout changes
VERSION = 1
#: options that never reach a traced step: where things are read from and written to (the model's files are keyed by
#: content instead), what is logged, sampled, checkpointed or pushed, the schedule and the optimizer's scalars, and
#: the guard's settings
NOT_TRACED = frozenset(
    {
        "pretrained_model_name_or_path",
        "train_data_dir",
        "instance_data_dir",
        "instance_prompt",
        "caption_extension",
        "dataset_name",
        "dataset_split",
        "dataset_config_name",
        "image_column",
        "caption_column",
        "video_column",
        "max_train_samples",
        "validation_split",
        "validation_data_dir",
        "max_bad_samples_fraction",
        "cache_dir",
        "mask_column",
        "dataloader_num_workers",
        "demo_num_images",
        "output_dir",
        "overwrite_output_dir",
        "seed",
        "num_train_epochs",
        "max_train_steps",
        "learning_rate",
        "scale_lr",
        "lr_scheduler",
        "lr_warmup_steps",
        "lr_num_cycles",
        "lr_power",
        "max_grad_norm",
        "adam_beta1",
        "adam_beta2",
        "adam_epsilon",
        "adam_weight_decay",
        "ema_decay",
        "ema_update_after_step",
        "ema_warmup",
        "ema_inv_gamma",
        "ema_power",
        "ema_update_interval",
        "ema_validation",
        "backbone_learning_rate",
        "checkpointing_steps",
        "checkpoints_total_limit",
        "resume_from_checkpoint",
        "allow_changed_options",
        "validation_prompt",
        "validation_prompt_separator",
        "network_weights",
        "init_lora_weights",
        "validation_steps",
        "num_validation_images",
        "validation_inference_steps",
        "validation_guidance_scale",
        "report_to",
        "logging_dir",
        "tracker_project_name",
        "push_to_hub",
        "hub_model_id",
        "hub_private",
        "push_later_ok",
        "finite_guard",
        "max_consecutive_skips",
        "rollback_lr_factor",
        "max_rollbacks",
        "max_skipped_fraction",
        "skip_loss_spikes",
        "ignore_memory_plan",
        "kernel_check_interval",
        "skip_doctor",
    }
)
#: a local folder's files left out of its key: weights (their shapes come from the configs, which are keyed)
WEIGHT_SUFFIXES = (".safetensors", ".bin", ".pt", ".pth", ".ckpt", ".gguf", ".msgpack", ".h5", ".onnx")


def cache_dir() -> Path:
    """``$HF_HOME/dit-lora/plans`` or ``~/.cache/dit-lora/plans`` (beside the latent cache's default root)."""
    return default_cache_root().parent / "plans"


def enabled() -> bool:
    """Off with ``DIT_LORA_PLAN_CACHE=0``."""
    return os.environ.get("DIT_LORA_PLAN_CACHE", "1") != "0"


@functools.lru_cache(maxsize=1)
def code_digest() -> str:
    """This dit-lora's source and the model libraries' versions: a new release or an edited file is a new key."""
    digest = hashlib.sha256()
    package = Path(__file__).resolve().parents[1]
    for path in sorted(package.rglob("*")):
        if path.suffix in (".py", ".json") and "__pycache__" not in path.parts:
            digest.update(str(path.relative_to(package)).encode() + b"\0" + path.read_bytes() + b"\0")
    for name in ("torch", "diffusers", "transformers", "peft"):
        try:
            digest.update(f"{name}={metadata.version(name)}".encode())
        except metadata.PackageNotFoundError:
            digest.update(f"{name}=none".encode())
    return digest.hexdigest()


def _model_identity(model: Any) -> Any:
    """A local folder by its files' content (weights left out); else the Hub id, the revision as given and the
    commit of the snapshot the Hub cache holds (a newer download is a new key even for files the plan reads
    outside its config reader)."""
    path = Path(str(model.pretrained_model_name_or_path or ""))
    if not path.is_dir():
        return [str(model.pretrained_model_name_or_path), model.revision, _cached_snapshot(model)]
    digest = hashlib.sha256()
    for file in sorted(p for p in path.rglob("*") if p.is_file()):
        if file.suffix not in WEIGHT_SUFFIXES and not file.name.startswith("."):
            digest.update(str(file.relative_to(path)).encode() + b"\0" + file.read_bytes() + b"\0")
    return digest.hexdigest()


def _cached_snapshot(model: Any) -> str | None:
    """The commit folder of the Hub cache's snapshot of ``model`` (None: not downloaded)."""
    from huggingface_hub import try_to_load_from_cache

    for name in ("model_index.json", "config.json"):
        try:
            found = try_to_load_from_cache(str(model.pretrained_model_name_or_path), name, revision=model.revision)
        except ValueError:  # not a Hub id (a missing local path): nothing cached under it
            return None
        if isinstance(found, str):
            return Path(found).parent.name
    return None


def key(family: str, cfg: Any, traced: dict[str, Any]) -> str:
    """The entry's name for ``cfg`` traced as ``traced`` (depths, settings, ...) by ``family``."""
    options = {k: v for k, v in cfg.options().items() if k not in NOT_TRACED}
    family_options = cfg.family_options
    own = dataclasses.asdict(family_options) if not isinstance(family_options, type) else {}
    blob = {
        "version": VERSION,
        "code": code_digest(),
        "family": family,
        "traced": traced,
        "options": options,
        "own": own,
        "model": _model_identity(cfg.model),
    }
    return hashlib.sha256(json.dumps(blob, sort_keys=True, default=str).encode()).hexdigest()[:32]


class RecordingReader:
    """The plan's config reader, noting each file read and a digest of what it gave."""

    def __init__(self, read: Callable[[str, str], dict | None]) -> None:
        self.read, self.seen = read, dict[str, str]()

    def __call__(self, subfolder: str, filename: str) -> dict | None:
        found = self.read(subfolder, filename)
        self.seen[f"{subfolder}\0{filename}"] = _digest(found)
        return found


def _digest(value: Any) -> str:
    return hashlib.sha256(json.dumps(value, sort_keys=True, default=str).encode()).hexdigest()


def lookup(name: str, read: Callable[[str, str], dict | None], decode: Callable[[Any], Any]) -> Any | None:
    """``decode(result)`` of the entry under ``name`` if every file it read still reads the same; else (no entry,
    a changed file, an entry that does not decode) None."""
    try:
        entry = json.loads((cache_dir() / f"{name}.json").read_text())
        if entry.get("version") != VERSION:
            return None
        for file, digest in entry["read"].items():
            subfolder, filename = file.split("\0")
            if _digest(read(subfolder, filename)) != digest:
                return None
        return decode(entry["result"])
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        return None


def store(name: str, reader: RecordingReader, result: Any) -> None:
    """Keep ``result`` (JSON) under ``name`` with the files ``reader`` saw; a failure to write is a miss later."""
    entry = {"version": VERSION, "read": reader.seen, "result": result}
    try:
        cache_dir().mkdir(parents=True, exist_ok=True)
        atomic_write(cache_dir() / f"{name}.json", lambda tmp: tmp.write_text(json.dumps(entry)))
    except OSError:
        pass
