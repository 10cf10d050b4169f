"""The held-out samples of the validation loss: chosen once, before anything is cached, never trained on.

Two sources, one at a time (the parser refuses both in one paragraph):

* ``--validation_split F`` holds out the fraction ``F`` of the usable training files. The choice is a pure function
  of ``--seed`` and each file's name (its ``key``): the files are ranked by a hash of (seed, key) and the first
  ``round(F * files)`` are held out. So every run with the same seed and data holds out the same files, on one
  process or eight, fresh or resumed, and adding a file moves at most the files ranked around the cut. A kohya
  ``N_words/`` file is one file: its copies stay together, and a held-out file counts once.
* ``--validation_data_dir DIR`` is a separate data set, listed and screened by a copy of the training data's own
  handler that reads ``DIR`` where the training data is read (:func:`handler_for_source`): the same metadata,
  caption files, kohya folders (each file once), datasets and annotation files, the same buckets and frames.

Both end in a list of screened held-out samples that :func:`~dit_lora.data.prepare.prepare_data` caches together
with the training samples (each file encoded once, into the same cache) and returns as ``PreparedData.held_out``.
"""

from __future__ import annotations

import contextlib
import copy
import dataclasses
import hashlib
import math
import os
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any

from dit_lora.core.errors import UserError
from dit_lora.data import preflight
from dit_lora.data.caption_files import refuse_unreadable_captions
from dit_lora.data.kohya import copy_of

if TYPE_CHECKING:
    from dit_lora.config.schema import DataOptions, TrainConfig, TrainingOptions

#: below this many held-out samples the run says that their mean loss is a noisy figure
FEW_HELD_OUT = 5


def sample_seed(seed: int, key: str) -> int:
    """A 63-bit seed for one held-out sample: a hash of the run's seed and the sample's key (its file name), the
    same in every run and on every process, whatever the sample's position or the number of processes."""
    digest = hashlib.sha256(f"{seed}\0{key}".encode()).digest()
    return int.from_bytes(digest[:8], "big") >> 1


def split_flags(samples: list, fraction: float, seed: int) -> list[bool]:
    """For each of ``samples``, whether ``--validation_split fraction`` holds it out (a kohya copy goes with its file).

    Files are ranked by :func:`sample_seed` of their key (ties, which only equal keys make, by position); the first
    ``round(fraction * files)`` are held out (halves round up).
    """
    origin = copy_of(samples)
    files = sorted(set(origin))
    count = math.floor(fraction * len(files) + 0.5)
    ranked = sorted(files, key=lambda i: (sample_seed(seed, samples[i].key), i))
    held = set(ranked[:count])
    return [origin[i] in held for i in range(len(samples))]


def first_copies(samples: list) -> list:
    """``samples`` without kohya repeats: a held-out file is evaluated once."""
    return [s for i, (s, first) in enumerate(zip(samples, copy_of(samples))) if first == i]


def handler_for_source(media, cfg: TrainConfig):
    """A copy of the training data's handler ``media`` reading ``cfg`` (the run's config with the held-out folder as
    its data source). A handler that caches what it read from its source offers ``for_source(cfg)`` (the
    Qwen-Image-Edit control images); the others keep nothing of the source and are copied as they are."""
    own = getattr(media, "for_source", None)
    if own is not None:
        return own(cfg)
    other = copy.copy(media)
    other.cfg = cfg
    return other


def folder_config(cfg: TrainConfig):
    """The run's config reading ``--validation_data_dir`` where the training data is read (``--train_data_dir`` or
    ``--dataset_name``), every file of it (no ``--max_train_samples``)."""
    held = cfg.data.validation_data_dir
    if cfg.data.dataset_name and not cfg.data.train_data_dir:
        data = dataclasses.replace(cfg.data, dataset_name=held, max_train_samples=None)
    else:
        data = dataclasses.replace(cfg.data, train_data_dir=held, max_train_samples=None)
    return dataclasses.replace(cfg, data=data)


def choose(
    media, samples: list, cfg: TrainConfig, *, log: Callable[[str], Any], quarantine: list[dict[str, Any]]
) -> tuple[list, list]:
    """(training samples, held-out samples) from the screened ``samples`` and the run's held-out source; without
    one, (``samples``, []). The held-out folder's unusable samples join ``quarantine`` marked with their source."""
    if cfg.data.validation_split is not None:
        return _split(samples, cfg.data, cfg.training, log)
    if cfg.data.validation_data_dir:
        return samples, _folder(media, cfg, log, quarantine)
    return samples, []


def _split(samples: list, data: DataOptions, training: TrainingOptions, log: Callable[[str], Any]) -> tuple[list, list]:
    fraction = data.validation_split
    assert fraction is not None  # choose() splits only when --validation_split is given
    flags = split_flags(samples, fraction, training.seed)
    files = len(set(copy_of(samples)))
    held = first_copies([s for s, f in zip(samples, flags) if f])
    train = [s for s, f in zip(samples, flags) if not f]
    train_files = files - len(held)
    if not held or not train_files:
        least = 0.5 / files if files else 0.5  # half a file rounds up to one
        raise UserError(
            f"--validation_split {fraction:g} of the {files} usable training sample(s) holds out "
            f"{len(held)} and leaves {train_files} to train on: "
            + (
                f"the validation loss needs at least one held-out sample (at least --validation_split "
                f"{math.ceil(least * 1000) / 1000:g} here)"
                if not held
                else "training needs at least one sample"
            )
            + ". Add data, change --validation_split, or give a separate --validation_data_dir."
        )
    log(
        f"validation loss: {len(held)} of {files} usable sample(s) held out (--validation_split {fraction:g}, chosen "
        f"by --seed {training.seed} and their names; kohya copies count once), never trained on; {train_files} train"
        + _few(len(held))
    )
    return train, held


def _folder(media, cfg: TrainConfig, log: Callable[[str], Any], quarantine: list[dict[str, Any]]) -> list:
    handler, where = handler_for_source(media, folder_config(cfg)), _where(cfg.data)
    own: list[dict[str, Any]] = []
    with _naming_the_folder(where):
        listed = first_copies(handler.list_samples())
        refuse_unreadable_captions(listed, where)  # every caption file that is not UTF-8, in one paragraph
        held = handler.screen(listed, log=lambda m: log(f"held-out ({where}): {m}"), quarantine=own)
    quarantine.extend({**entry, "source": "--validation_data_dir"} for entry in own)
    if not held:
        raise UserError(
            f"{where} holds no usable sample ({len(listed)} listed, {len(own)} left out: see quarantine.json), so "
            "there is nothing to compute the validation loss on. Point it at a folder of samples laid out as the "
            "training data, or use --validation_split."
        )
    log(
        f"validation loss: {len(held)} held-out sample(s) from {where}"
        + (f" ({len(own)} left out, see quarantine.json)" if own else "")
        + _few(len(held))
    )
    return held


def check(media, cfg: TrainConfig, samples: list, *, log: Callable[[str], Any], show_ok: bool = False) -> bool:
    """``dit-lora check-data``: what a run would hold out; returns whether a held-out sample blocks.

    ``--validation_split``: the line a run logs for the usable ``samples`` (those no BLOCK row leaves out), or its
    refusal, and the held-out files by name. ``--validation_data_dir``:
    the folder checked by the training handler's own ``check`` (each file once), its table and summary line.
    """
    if cfg.data.validation_split is not None:
        _, held = choose(media, samples, cfg, log=log, quarantine=[])
        keys = [s.key for s in held]
        log("held out: " + ", ".join(keys[:20]) + (f" and {len(keys) - 20} more" if len(keys) > 20 else ""))
        return False
    if not cfg.data.validation_data_dir:
        return False
    handler, where = handler_for_source(media, folder_config(cfg)), _where(cfg.data)
    log(f"held-out data of the validation loss ({where}):")
    with _naming_the_folder(where):
        rows, usable, note = handler.check(first_copies(handler.list_samples()), log=log)
    for line in filter(None, [preflight.format_table(rows, show_ok=show_ok), note, preflight.summarize(rows)]):
        log(line)
    if not usable:
        log(f"{where}: no usable held-out sample, so a run would stop: nothing to compute the validation loss on.")
    return preflight.has_blocking(rows) or not usable


def check_options(data: DataOptions) -> None:
    """A --validation_data_dir that does not exist, for a run reading its training data from a folder or file: one
    paragraph before anything loads (the listing would say it only after the model)."""
    folder = data.validation_data_dir
    if folder and not data.dataset_name and not os.path.exists(folder):
        raise UserError(
            f"--validation_data_dir {folder!r} does not exist. Pass the folder (or annotation file) of the held-out "
            "samples, laid out as the training data is, or hold out a share of the training data with "
            "--validation_split instead."
        )


def _where(data: DataOptions) -> str:
    return f"--validation_data_dir `{data.validation_data_dir}`"


@contextlib.contextmanager
def _naming_the_folder(where: str) -> Iterator[None]:
    """A listing's or screening's paragraph, which names the training option it reads the folder as, said to be about
    the held-out folder."""
    try:
        yield
    except UserError as err:
        raise UserError(
            f"{where} (the held-out data of the validation loss, read as the training data is: the paragraph below "
            f"names the training option it stands in for) cannot be used. {err}"
        ) from None


def shared_line(train_files: list, held_files: list, held: list) -> str | None:
    """A warning naming the held-out samples whose cache entry (content and bucket) is also a training sample's: a
    file in both folders is trained on, and its loss is no held-out figure. None when there is none."""
    trained = set(train_files)
    both = [s.key for s, f in zip(held, held_files) if f in trained]
    if not both:
        return None
    named = ", ".join(both[:5]) + (f" and {len(both) - 5} more" if len(both) > 5 else "")
    return (
        f"warning: {len(both)} held-out sample(s) of --validation_data_dir have the content of a training sample "
        f"({named}): they are trained on, so the validation loss is not a held-out figure for them. Remove them "
        "from one of the two folders."
    )


def _few(count: int) -> str:
    if count >= FEW_HELD_OUT:
        return ""
    return (
        f". warning: a mean over {count} sample(s), each at one fixed noise and timestep, moves much with each "
        "sample's draw: compare its trend, not single values, or hold out more samples"
    )


__all__ = [
    "FEW_HELD_OUT",
    "check",
    "choose",
    "first_copies",
    "folder_config",
    "handler_for_source",
    "sample_seed",
    "shared_line",
    "split_flags",
]
