"""``--dataset_config FILE`` (or a ``datasets:`` list in the ``--config`` YAML): several data sets in one run.

The file is read once, at setup (:func:`with_data_sets`: the parser, ``check-data``, or resolving a config built in
code), by :mod:`.dataset_file`; the run's config then holds it, typed (``cfg.data_sets``, :func:`data_sets_of`),
and the folder checks, the data sets, the plan and the validation samples read that, never the file. This module
also decides which level's data source a run takes (the command line's or the ``--config`` file's) and judges the
sets against the run's options (:func:`check_data_sets`); every refusal is one paragraph naming the file, the set
and the key. :mod:`dit_lora.data.data_sets` screens, caches and mixes the sets a run trains on.
"""

from __future__ import annotations

import argparse
import dataclasses
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from dit_lora.config import families
from dit_lora.config.applies import check_applies
from dit_lora.config.dataset_file import DataSet, DatasetConfig, read_dataset_config
from dit_lora.core.errors import UserError

if TYPE_CHECKING:
    from dit_lora.config.schema import DataOptions, TrainConfig, VideoOptions

#: the options naming a run's one data source: a dataset config's sets take their place
SOURCE_KEYS = ("train_data_dir", "instance_data_dir", "dataset_name")


def source_flags(argv: Sequence[str]) -> set[str]:
    """The data-source options (:data:`SOURCE_KEYS` and ``dataset_config``) given a value on the command line (an
    empty value, ``""`` or ``none``, unsets the --config file's key instead)."""
    peek = argparse.ArgumentParser(add_help=False, allow_abbrev=False)
    for name in (*SOURCE_KEYS, "dataset_config"):
        peek.add_argument(f"--{name}", default=None)
    try:
        known, _ = peek.parse_known_args(list(argv))
    except SystemExit:  # a flag without its value: the full parser says so
        return set()
    return {name for name, value in vars(known).items() if value and value.lower() not in ("none", "null")}


def source_by_level(file_values: dict[str, Any], flags: set[str], path: str | Path) -> tuple[dict[str, Any], list]:
    """The --config file's values without the data source a command-line flag (``flags``: :func:`source_flags`)
    takes the place of, and the notes saying so, as every flag overrides its key: --dataset_config on the command
    line replaces the file's ``train_data_dir``/``dataset_name``, and --train_data_dir/--dataset_name the file's
    ``datasets:`` list or ``dataset_config``; --instance_data_dir (diffusers' name for --train_data_dir) replaces the
    file's ``train_data_dir`` as --train_data_dir replaces its ``instance_data_dir``. Two at one level stay, for
    :func:`refuse_two_sources`."""
    values, notes = dict(file_values), []
    folder_flags = {"train_data_dir", "instance_data_dir"} & flags
    if len(folder_flags) == 1:  # diffusers' --instance_data_dir is --train_data_dir: either flag overrides either key
        values.pop(({"train_data_dir", "instance_data_dir"} - folder_flags).pop(), None)
    if "dataset_config" in flags:
        for key in SOURCE_KEYS:
            if values.get(key) and key not in flags:
                notes.append(
                    f"--dataset_config on the command line takes the place of `{key}: {values.pop(key)}` in "
                    f"`{path}`: the run trains on the dataset config's sets"
                )
    given = [f"--{key}" for key in SOURCE_KEYS if key in flags]
    if given and values.get("dataset_config") and "dataset_config" not in flags:
        listed = str(values.pop("dataset_config"))
        theirs = "the `datasets:` list" if Path(listed) == Path(path) else f"`dataset_config: {listed}`"
        notes.append(f"{given[0]} on the command line takes the place of {theirs} in `{path}`")
    return values, notes


def refuse_two_sources(values: dict[str, Any], flags: set[str], path: str | Path | None) -> None:
    """Refuse, naming the exact fix, a data source beside a dataset config given at one level (both flags, or both
    keys of the --config file; across levels the command line took the place of the file's: :func:`source_by_level`)."""
    listed = values.get("dataset_config")
    sources = [key for key in SOURCE_KEYS if values.get(key)]
    if not listed or not sources:
        return
    key, folder = sources[0], values[sources[0]]
    add = f"add it to the dataset config as a set (`- {key}: {folder}`)"
    if key in flags:
        raise UserError(
            f"--{key} `{folder}` and --dataset_config `{listed}` are both on the command line, and both name the "
            f"training data (each set of a dataset config names its own folder or dataset). Drop --{key} (or {add}), "
            "or drop --dataset_config."
        )
    theirs = "a `datasets:` list" if path and Path(listed) == Path(path) else f"`dataset_config: {listed}`"
    raise UserError(
        f"`{key}: {folder}` and {theirs} are both in `{path}`, and both name the training data (each set of a "
        f"dataset config names its own folder or dataset). Remove `{key}` from `{path}` (or {add}), or remove "
        f"{theirs}. (--dataset_config on the command line takes the place of the file's `{key}`.)"
    )


def with_data_sets(cfg: TrainConfig, *, standalone: bool = False) -> TrainConfig:
    """``cfg`` holding its dataset config as read (``cfg.data_sets``), for its family's clips or images: the run's one
    reading of the file, at setup (the parser, ``check-data``, or resolving a config built in code); ``cfg`` itself
    without one, or when it holds that file's reading already. ``standalone``: a ``--dataset_config`` file, not the
    run's ``--config`` YAML (a run option at its top is refused). A video LLM reads no dataset config: refused before
    the file is read."""
    path = cfg.data.dataset_config
    if not path:
        return cfg
    capabilities = families.source().capabilities(cfg.model.family)
    if "VideoQA" in capabilities:
        raise UserError(
            f"`{cfg.model.family}` is a video LLM, which reads one annotation file of conversations; a dataset config "
            f"(`{path}`) lists data sets for the diffusion families. Give the annotation folder as --train_data_dir."
        )
    video = "VideoFrames" in capabilities
    if cfg.data_sets is not None and cfg.data_sets.read_from(path, video):
        return cfg
    return dataclasses.replace(cfg, data_sets=read_dataset_config(path, video=video, standalone=standalone))


def data_sets_of(data: DataOptions, data_sets: DatasetConfig | None) -> DatasetConfig | None:
    """The run's dataset config as setup read it (:func:`with_data_sets`), None without one. Never read here: a run
    reads the file once, and it may change or go while the run trains."""
    path = data.dataset_config
    if not path:
        return None
    if data_sets is None or Path(data_sets.path) != Path(path):
        raise RuntimeError(
            f"the dataset config `{path}` is read at setup (with_data_sets: the parser, check-data, resolve), "
            "not by the code that uses its sets"
        )
    return data_sets


def check_data_sets(cfg: TrainConfig) -> None:
    """A dataset config's and prior preservation's checks (``check-data`` runs them as ``train`` does), on the sets
    setup read (:func:`with_data_sets`). The parser's first look at a config whose family it has still to infer has
    no sets read (they are read for the family it finds, then judged): nothing to judge yet."""
    if cfg.data.dataset_config and cfg.data_sets is None:
        return
    if cfg.data.dataset_config:
        _check_dataset_config(cfg)
    _check_prior(cfg)


#: the options of prior preservation's class images, read only with --with_prior_preservation
_CLASS_OPTIONS = ("class_data_dir", "class_prompt", "num_class_images", "sample_batch_size")


def _check_prior(cfg: TrainConfig) -> None:
    """Prior preservation's options: its class folder given, one source of class images, and no class option
    given without it (it would be ignored)."""
    data = cfg.data
    read = data_sets_of(data, cfg.data_sets)
    reg = [s.name for s in read.sets if s.is_reg] if read is not None else []
    if data.with_prior_preservation:
        if reg:
            raise UserError(
                f"--with_prior_preservation and the dataset config's `is_reg` set `{reg[0]}` both name the class "
                "images. Keep one: drop the flag (the set is the class images) or the set's `is_reg`."
            )
        if not data.class_data_dir:
            raise UserError(
                "--with_prior_preservation needs --class_data_dir: the folder of class images (e.g. photos of dogs "
                "for `a photo of sks dog`), read as --train_data_dir is; when it holds fewer than --num_class_images "
                "(100 unless given), the rest are generated there from --class_prompt with the base model."
            )
        return
    given = [f"--{n}" for n in _CLASS_OPTIONS if cfg.is_set(n)]
    if cfg.is_set("prior_loss_weight") and not reg:
        given.append("--prior_loss_weight")
    if given:
        raise UserError(
            f"{', '.join(given)} belong(s) to prior preservation, which is off, so it would be ignored. Add "
            "--with_prior_preservation (with --class_data_dir and --class_prompt), mark a dataset config's set "
            f"`is_reg: true`, or remove {' and '.join(given)}."
        )


def _check_dataset_config(cfg: TrainConfig) -> None:
    """A dataset config's sets (each key and value checked when read) judged for the family as their flags would be,
    and no run-level data source beside them."""
    path = cfg.data.dataset_config
    assert path
    if cfg.data.repeats > 1:
        raise UserError(
            f"--repeats {cfg.data.repeats} and the dataset config `{path}` both say how often samples are listed; "
            "each set gives its own `repeats` (or `general:` for all). Move it into the dataset config."
        )
    beside = [f"--{n}" for n in ("train_data_dir", "dataset_name") if getattr(cfg.data, n)]
    if beside:
        raise UserError(
            f"{' and '.join(beside)} and the dataset config `{path}` both name the training data; each set of the "
            "dataset config names its own folder or dataset. Move it into the dataset config as a set "
            f"(`train_data_dir: {getattr(cfg.data, beside[0][2:])}`), or drop --dataset_config / `datasets:`."
        )
    read = data_sets_of(cfg.data, cfg.data_sets)
    assert read is not None  # a config with a dataset config holds its reading
    for i, data_set in enumerate(read.sets, 1):
        explicit = frozenset(data_set.options)
        probe = dataclasses.replace(cfg, **data_set.options, explicit=explicit)
        where = f"data set {i} of {path}"
        check_applies(probe.model.family, probe.explicit, lambda name: f"`{data_set.keys.get(name, name)}` in {where}")  # noqa: B023 (this set)
        _check_frame_sizes(cfg.video, data_set, f"data set {i} (`{data_set.name}`) of {path}")
        _check_origin(cfg, data_set, f"data set {i} (`{data_set.name}`) of {path}")


def _check_origin(cfg: TrainConfig, data_set: DataSet, where: str) -> None:
    """A run's explicit option (a flag or a --config key) that another trainer's key of the set contradicts, refused:
    the set's would win silently. (A value that trainer only implies yields to the run's: :func:`set_config`.)"""
    for name, words in data_set.derived.origin.items():
        ours = data_set.options.get(name)
        if cfg.is_set(name) and ours is not None and cfg.option(name) != ours:
            key = words.strip("`").split()[0].rstrip(":")
            raise UserError(
                f"The run's --{name} {cfg.option(name)} and {words} of {where} disagree: that key means `{name}: "
                f"{ours}` for the set, which would take the place of the run's. Drop --{name} from the command line "
                f"(or the --config file), or remove `{key}` from the set (then the run's --{name} "
                "applies to it)."
            )


#: a set's frame sizes: its `frame_buckets` take the place of the run's (set_config), never of its own
FRAME_SIZES = ("max_num_frames", "height", "width")


def _check_frame_sizes(video: VideoOptions, data_set: DataSet, where: str) -> None:
    """A set's own ``frame_buckets`` beside its own (or ``general``'s) sizes, or the run's --frame_buckets beside a
    set's sizes, refused: one would be ignored. The run's sizes yield to a set's own ``frame_buckets``."""
    own = [n for n in FRAME_SIZES if data_set.options.get(n) is not None]
    if not own:
        return
    named = ", ".join(f"`{n}`" for n in own)
    if data_set.options.get("frame_buckets"):
        raise UserError(
            f"`frame_buckets: {data_set.options['frame_buckets']}` of {where} sets every clip's frames and size, so "
            f"its {named} (given to the set or in `general`) would be ignored. Remove {named} from the set (or "
            "`general`), or its `frame_buckets`."
        )
    if video.frame_buckets:
        raise UserError(
            f"The run's --frame_buckets {video.frame_buckets} sets every clip's frames and size, so {named} of "
            f"{where} would be ignored. Give the set its own `frame_buckets` (they take the place of the run's), "
            "or drop --frame_buckets from the run."
        )
