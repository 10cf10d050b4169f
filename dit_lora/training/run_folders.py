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
"""

from __future__ import annotations

import os
import re
from pathlib import Path

from dit_lora.config import TrainConfig
from dit_lora.core.errors import UserError

__all__ = ["check_folders_apart", "data_folders", "written_folders"]

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
