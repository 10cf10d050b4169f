"""The folders a run writes kept apart from the folders it reads its data from, judged before anything is written.

A run writes its adapter, card, loss curve, samples and checkpoints into ``--output_dir``, tracker files into
``--logging_dir`` and cache entries into ``--cache_dir``. One of them equal to or inside a data folder
(``--train_data_dir``, ``--validation_data_dir``, a local ``--dataset_name`` folder, a video LLM's ``--video_folder``)
writes into the user's data: the next run lists ``samples/*.png`` and ``loss_curve.png`` as training images (and
refuses them for having no caption), and the data folder fills with files the user never put there. Refused in one
paragraph, before the lock, the demo or any other write.

The other way round, a data folder inside ``--output_dir`` is accepted: the run writes only its own named files
and folders there (the adapter files, ``README.md``, ``train_summary.json``, ``loss_curve.png``, ``samples/``,
the logging folder, ``checkpoint-N/``) and ``--push_to_hub`` uploads only those, so a data folder beside them is
read, never written. A data folder inside one of the folders the run writes (``samples/``, the logging folder, a
``checkpoint-N/``) is refused like the first case.

:func:`check_run_folders` also refuses a folder that cannot be written; :func:`check_output_dir` (after the output
lock) a finished run or an older run's checkpoints in ``--output_dir``.
"""

from __future__ import annotations

import os
import re
import shutil
from pathlib import Path

from dit_lora.config import TrainConfig
from dit_lora.config.dataset_config import data_sets_of
from dit_lora.config.schema import CheckpointOptions, TrainingOptions
from dit_lora.core.errors import UserError
from dit_lora.core.fileio import check_writable
from dit_lora.data.cache import default_cache_root
from dit_lora.output.names import ADAPTER_FILES, ADAPTER_INDEX_FILE

__all__ = [
    "check_folders_apart",
    "check_output_dir",
    "check_run_folders",
    "data_folders",
    "old_checkpoints",
    "written_folders",
]

#: the folders of --output_dir the run writes into (besides the logging folder)
_WRITTEN_SUBFOLDERS = re.compile(r"^(samples|(\.tmp-|\.old-)?checkpoint-\d+)$")


def data_folders(cfg: TrainConfig) -> list[tuple[str, str]]:
    """``(flag, folder)`` of every local folder the run reads data from (a data *file*'s folder is not one)."""
    found = [("--train_data_dir", cfg.data.train_data_dir), ("--validation_data_dir", cfg.data.validation_data_dir)]
    if cfg.data.dataset_name and os.path.isdir(
        cfg.data.dataset_name
    ):  # a local `datasets` folder; a Hub id is no folder here
        found.append(("--dataset_name", cfg.data.dataset_name))
    found.append(("--video_folder", getattr(cfg.family_options, "video_folder", None)))  # the video LLMs' option
    read = data_sets_of(cfg.data, cfg.data_sets)  # each set's folder, as setup read the dataset config
    for data_set in read.sets if read is not None else ():
        where = f"--dataset_config set {data_set.name}:"
        found.append((where, data_set.options.get("train_data_dir")))
        name = data_set.options.get("dataset_name")
        found.append((where, name if name and os.path.isdir(name) else None))
    return [(flag, folder) for flag, folder in found if folder and not os.path.isfile(folder)]


def written_folders(cfg: TrainConfig) -> list[tuple[str, str]]:
    """``(flag, folder)`` of every folder the run writes into: the output folder, the logging folder when a tracker
    writes it, and an explicit latent cache folder when the latents are cached."""
    out = Path(cfg.training.output_dir)
    found = [("--output_dir", str(out))]
    if cfg.validation.logging_dir and cfg.validation.report_to != "none":
        # absolute: itself; relative: inside the output
        found.append(("--logging_dir", str(out / cfg.validation.logging_dir)))
    cache_dir = cfg.data.cache_dir
    if cache_dir and cfg.data.cache_latents:
        found.append(("--cache_dir", cache_dir))
    return found


def _real(path: str) -> Path:
    # resolved (links, `..`, `~`), so a link to the data folder or a relative spelling of it is the same folder
    return Path(os.path.realpath(os.path.expanduser(path)))


def _inside(path: Path, folder: Path) -> bool:
    return path == folder or folder in path.parents


def check_folders_apart(cfg: TrainConfig) -> None:
    """Refuse, in one paragraph, a folder the run writes (:func:`written_folders`) that is a data folder or lies
    inside one (:func:`data_folders`), or a data folder inside a folder of ``--output_dir`` the run writes into."""
    data = [(flag, folder, _real(folder)) for flag, folder in data_folders(cfg)]
    for w_flag, w_folder in written_folders(cfg):
        written = _real(w_folder)
        for d_flag, d_folder, real in data:
            if not _inside(written, real):
                continue
            where = "is" if written == real else "lies inside"
            sibling = real.parent / "output"
            raise UserError(
                f"`{w_flag} {w_folder}` {where} the data folder `{d_flag} {d_folder}`: the run would write its "
                f"files (adapter, samples, loss curve, checkpoints, logs or cache entries) into the data, and the "
                f"next run would list them as training data. Choose a {w_flag} outside `{d_folder}` (e.g. a sibling "
                f"folder such as `{sibling}`), and run again; nothing "
                f"was written."
            )
    out = _real(cfg.training.output_dir)
    logging = next((_real(f) for flag, f in written_folders(cfg) if flag == "--logging_dir"), None)
    for d_flag, d_folder, real in data:
        if real == out or out not in real.parents:
            continue
        first = real.relative_to(out).parts[0]
        if _WRITTEN_SUBFOLDERS.match(first) or (logging is not None and _inside(real, logging)):
            raise UserError(
                f"`{d_flag} {d_folder}` lies inside `{Path(cfg.training.output_dir) / first}`, a folder the run writes into "
                f"(--output_dir's samples, logs or checkpoints): the run would add its own files to the data. Move the "
                f"data out of --output_dir `{cfg.training.output_dir}`, or choose another --output_dir, and run again."
            )


def check_output_dir(training: TrainingOptions, checkpoints: CheckpointOptions) -> str | None:
    """Refuse to overwrite a finished run, or to mix a fresh run with an older run's checkpoints, unless asked to
    (or resuming); return a line to log when ``--overwrite_output_dir`` removed old checkpoints.

    Called on the main process after the output lock: nothing else writes the folder meanwhile.
    """
    out = Path(training.output_dir)
    if out.exists() and not out.is_dir():
        raise UserError(f"--output_dir `{out}` is a file, not a folder. Choose a folder path.")
    done = [name for name in (*ADAPTER_FILES, ADAPTER_INDEX_FILE) if (out / name).exists()]
    if done and not training.overwrite_output_dir and not checkpoints.resume_from_checkpoint:
        raise UserError(
            f"--output_dir `{out}` already holds a finished run ({done[0]}). Choose a new --output_dir, "
            "add --overwrite_output_dir to replace it, or --resume_from_checkpoint latest to continue it."
        )
    check_named_copy(training, out)
    if checkpoints.resume_from_checkpoint:
        return None
    # A fresh run among older checkpoints would prune its own new ones (pruning keeps the highest steps) and a
    # later `latest` would resume the older run: they never mix.
    old = old_checkpoints(out)
    if not old:
        return None
    names = ", ".join(p.name for p in old[:5]) + (f" and {len(old) - 5} more" if len(old) > 5 else "")
    if not training.overwrite_output_dir:
        raise UserError(
            f"--output_dir `{out}` holds checkpoints of an earlier run ({names}), and this run does not resume: "
            "its own checkpoints would mix with them. Continue that run with --resume_from_checkpoint latest, choose "
            "another --output_dir, or add --overwrite_output_dir to remove them and start over."
        )
    for path in old:
        shutil.rmtree(path)
    return f"--overwrite_output_dir: removed {len(old)} checkpoint folder(s) of an earlier run from {out} ({names})"


def check_named_copy(training: TrainingOptions, out: Path) -> None:
    """``--output_name NAME``: refuse, before training, a ``NAME.safetensors`` in ``out`` that dit-lora did not write
    (the run would otherwise stop at its end, the adapter written but not its named copy)."""
    if not training.output_name:
        return
    from dit_lora.output.export import EXPORT_MARKER, written_by_export

    target = out / f"{training.output_name}.safetensors"
    if target.is_symlink() or (target.exists() and not (target.is_file() and written_by_export(target))):
        raise UserError(
            f"--output_name {training.output_name}: {target} already exists and dit-lora did not write it (its "
            f"safetensors metadata has no `{EXPORT_MARKER}` entry), so the run would not replace it with the adapter's "
            "named copy. Move or rename that file, or choose another --output_name."
        )


def check_run_folders(cfg: TrainConfig) -> None:
    """Refuse, in one paragraph, an --output_dir, --logging_dir or latent cache folder (--cache_dir, else the
    default one) that is or lies inside a data folder (:func:`~dit_lora.training.run_folders.check_folders_apart`)
    or cannot be written (a read-only file system, no permission)."""
    check_folders_apart(cfg)  # first: the write probes below would already write into the data
    out = Path(cfg.training.output_dir)
    check_writable(out, "--output_dir")
    if cfg.validation.logging_dir and cfg.validation.report_to != "none":
        check_writable(
            out / cfg.validation.logging_dir, "--logging_dir", " (A relative --logging_dir is inside --output_dir.)"
        )
    if cfg.data.cache_latents:
        if cfg.data.cache_dir:
            check_writable(cfg.data.cache_dir, "--cache_dir")
        else:
            check_writable(
                default_cache_root(),
                "--cache_dir",
                " (It is the default cache folder: $HF_HOME/dit-lora/"
                "cache or ~/.cache/dit-lora/cache; pass --cache_dir to put the cache elsewhere.)",
            )


def old_checkpoints(out: Path) -> list[Path]:
    """Every checkpoint folder in ``out``, whole, incomplete or half-replaced (``checkpoint-*``,
    ``.tmp-checkpoint-*``, ``.old-checkpoint-*``), sorted by name."""
    if not out.is_dir():
        return []
    return sorted(p for p in out.iterdir() if p.is_dir() and _CHECKPOINT_DIR.match(p.name))


_CHECKPOINT_DIR = re.compile(r"^(\.tmp-|\.old-)?checkpoint-\d+$")
