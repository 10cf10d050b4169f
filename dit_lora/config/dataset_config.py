"""``--dataset_config FILE`` (or a ``datasets:`` list in the ``--config`` YAML): several data sets in one run.

A dataset config is a YAML or TOML file with a ``datasets`` list, each set keyed by the data options a single run
takes under their own names (:data:`SET_OPTIONS`: ``train_data_dir`` or ``dataset_name``, ``resolution``,
``caption_extension``, ``instance_prompt``, frame options, ...) plus its own keys (:data:`SET_KEYS`): ``name``,
``repeats``, ``weight`` (the probability a batch comes from it) and ``loss_weight``. An optional ``general``
mapping (musubi-tuner's and kohya's sd-scripts' ``[general]``) gives every set its defaults. Options that hold for
the whole run (``random_flip``, ``cache_dir``, ``validation_split``, ...) stay run options: given in a set they are
refused, naming where they belong. Every refusal is one paragraph naming the file, the set and the key.

This module reads and checks the file (the config layer: no data is listed here); :mod:`dit_lora.data.data_sets`
screens, caches and mixes the sets a run trains on.
"""

from __future__ import annotations

import argparse
import dataclasses
import difflib
import json
import math
import tomllib
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import yaml

from dit_lora.config import families, peer_ai_toolkit, peer_datasets, peer_files, peer_musubi
from dit_lora.config.applies import check_applies
from dit_lora.config.set_keys import said
from dit_lora.config.values import coerce
from dit_lora.core.errors import UserError

if TYPE_CHECKING:
    from dit_lora.config.schema import TrainConfig

#: the data options a set may give (each read by that set's listing, screening and caching alone)
SET_OPTIONS = (
    "train_data_dir",
    "instance_data_dir",
    "dataset_name",
    "dataset_split",
    "dataset_config_name",
    "image_column",
    "caption_column",
    "video_column",
    "caption_extension",
    "instance_prompt",
    "max_train_samples",
    "resolution",
    "max_image_pixels",
    "aspect_buckets",
    "center_crop",
    "mask_column",
    "max_num_frames",
    "height",
    "width",
    "frame_buckets",
    "frame_sampling",
)

#: a set's own keys, with what each means (the refusal of an unknown key lists them)
SET_KEYS = {
    "name": "how the log, check-data and the summary name the set (default: its folder's or dataset's name)",
    "repeats": "how many times each of its samples is listed per epoch (a whole number, 1 or more; default 1)",
    "weight": "the probability that a batch comes from it (positive; given to every set or to none)",
    "loss_weight": "its batches' loss is multiplied by this (positive; default 1)",
    "is_reg": "true: its images are the class (regularization) images paired with every batch of the others, their "
    "loss weighted by --prior_loss_weight (one set at most)",
}

#: other trainers' names of a set's keys, read as ours (musubi-tuner, kohya's sd-scripts, ai-toolkit)
PEER_KEYS = {
    "image_directory": "train_data_dir",
    "video_directory": "train_data_dir",
    "image_dir": "train_data_dir",
    "folder_path": "train_data_dir",
    "num_repeats": "repeats",
    "caption_ext": "caption_extension",
}

#: data options that hold for the whole run: given in a set, refused with where they belong
RUN_WIDE = (
    "random_flip",
    "caption_dropout_probability",
    "cache_latents",
    "cache_dir",
    "masked_loss",
    "unmasked_weight",
    "normalize_masked_area_loss",
    "validation_split",
    "validation_data_dir",
    "max_bad_samples_fraction",
    "dataloader_num_workers",
    "max_sequence_length",
)

#: the keys of a dataset config's top level (a run config's ``--config`` YAML holds its options beside them)
TOP_KEYS = ("general", "datasets")

#: the ``--config`` YAML key that lists the sets in the run config itself
DATASETS_KEY = "datasets"

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


@dataclass(frozen=True)
class DataSet:
    """One data set of a dataset config: its options (flat names, coerced) and its own keys."""

    name: str
    options: dict[str, Any] = field(default_factory=dict)
    repeats: int = 1
    weight: float | None = None
    loss_weight: float = 1.0
    #: the class (regularization) images of prior preservation (``is_reg: true``)
    is_reg: bool = False
    #: the file's own name of an option, where it is not the option's (musubi-tuner's ``image_directory`` for
    #: ``train_data_dir``): what the set's messages call it
    keys: dict[str, str] = field(default_factory=dict)
    #: what its options stand for in another trainer's file (implied defaults, sizes fitted to the family)
    derived: peer_datasets.Derived = field(default_factory=peer_datasets.Derived)

    @property
    def source(self) -> str:
        """How a message names its data (``train_data_dir `photos```)."""
        if self.options.get("train_data_dir"):
            return f"train_data_dir `{self.options['train_data_dir']}`"
        return f"dataset_name `{self.options['dataset_name']}`"


def read_file(path: str | Path) -> Any:
    """The parsed dataset config: YAML, TOML by its ``.toml`` suffix, JSON by ``.json``; a mapping, or a list when it
    is another trainer's (SimpleTuner's backends, OneTrainer's concepts: :mod:`.peer_files`); errors name the file."""
    path = Path(path)
    if not path.is_file():
        raise UserError(f"The dataset config `{path}` (--dataset_config) does not exist. Check the path.")
    text = path.read_text(encoding="utf-8", errors="replace")
    suffix = path.suffix.lower()
    try:
        data = (
            tomllib.loads(text)
            if suffix == ".toml"
            else json.loads(text)
            if suffix == ".json"
            else yaml.safe_load(text)
        )
    except (tomllib.TOMLDecodeError, yaml.YAMLError, json.JSONDecodeError) as err:
        kind = {".toml": "TOML", ".json": "JSON"}.get(suffix, "YAML")
        yaml_named = peer_datasets.yaml_named_toml(path, text, err, "--dataset_config") if kind == "TOML" else None
        raise UserError(
            yaml_named or f"The dataset config `{path}` is not valid {kind} ({err}). Fix the syntax at the place shown."
        )
    if not isinstance(data, dict) and not (isinstance(data, list) and peer_files.flavour_of(data)):
        raise UserError(
            f"The dataset config `{path}` must be a mapping with a `datasets` list, not {type(data).__name__} (a "
            "list is read when it is SimpleTuner's backends or OneTrainer's concepts; this one is neither)."
        )
    return data


def check_standalone(path: str | Path) -> None:
    """A ``--dataset_config`` file (not the run's ``--config``) holds only ``general`` and ``datasets``: a run option
    at its top would be ignored, so it is refused naming where it belongs."""
    data = read_file(path)
    if isinstance(data, list) or peer_files.flavour_of(data):
        return  # another trainer's file: only its sets are read, its other keys named
    if peer_datasets.flavour_of(data, [], False) == peer_ai_toolkit.AI_TOOLKIT:
        return  # an ai-toolkit job file: only its datasets are read
    others = [str(k) for k in data if k not in TOP_KEYS]
    if others:
        raise UserError(
            f"The dataset config `{path}` has top-level key(s) {', '.join(f'`{k}`' for k in others)}; a dataset config "
            "holds only `datasets` (the list of sets) and `general` (options every set takes unless it gives its "
            "own). Move data options under `general:` and run options to --config or the command line; or write "
            "the `datasets:` list into the --config YAML itself."
        )


@dataclass(frozen=True)
class DatasetConfig:
    """A dataset config as read: its sets, whose file it is (None: dit-lora's own, else
    :data:`~.peer_musubi.MUSUBI` or :data:`~.peer_ai_toolkit.AI_TOOLKIT`) and the paragraph naming what of another
    trainer's file was left out (None: nothing)."""

    sets: list[DataSet]
    flavour: str | None = None
    note: str | None = None


def read_data_sets(path: str | Path, *, video: bool = False) -> list[DataSet]:
    """The sets of the dataset config at ``path`` (:func:`read_dataset_config`)."""
    return read_dataset_config(path, video=video).sets


def read_dataset_config(path: str | Path, *, video: bool = False) -> DatasetConfig:
    """The dataset config at ``path`` (a ``--dataset_config`` file, a ``--config`` YAML with a ``datasets:`` list,
    musubi-tuner's TOML or an ai-toolkit job YAML), each set checked: known keys, values of the option's type, one
    data source, repeats, weights. ``video``: the run's family trains clips (how another trainer's sizes map)."""
    path = Path(path)
    data = read_file(path)
    peer = peer_files.read_peer(data, path, video=video, own=frozenset([*SET_OPTIONS, *SET_KEYS]))
    if peer is not None:
        return _read_sets(path, [(w, t, t, k, d) for w, t, k, d in peer.sets], peer.flavour, peer.notes)
    ai_toolkit = peer_datasets.flavour_of(data, [], False) == peer_ai_toolkit.AI_TOOLKIT
    listed = peer_ai_toolkit.ai_toolkit_sets(data, path) if ai_toolkit else data.get(DATASETS_KEY)
    if not isinstance(listed, list) or not listed or not all(isinstance(s, dict) for s in listed):
        raise UserError(
            f"The dataset config `{path}` needs a non-empty `datasets` list of mappings, one per data set, e.g. "
            "`datasets: [{train_data_dir: photos, repeats: 2}, {train_data_dir: clips}]` (TOML: one `[[datasets]]` "
            f"table per set); it has {type(listed).__name__ if listed is not None else 'none'}."
        )
    general = {} if ai_toolkit else data.get("general") or {}
    if not isinstance(general, dict):
        raise UserError(f"`general` in the dataset config `{path}` must be a mapping of option: value.")
    flavour = peer_datasets.flavour_of(data, listed, path.suffix.lower() == ".toml")
    raw: list[tuple[str, dict, dict, dict, peer_datasets.Derived]] = []
    notes: list[str] = []
    for i, entry in enumerate(listed, 1):
        where = f"data set {i} (of {len(listed)})"
        merged = {**general, **entry}
        if flavour is None:
            raw.append((where, merged, entry, {}, peer_datasets.Derived()))
            continue
        for part in peer_musubi.expand_subsets(merged):
            translated, left = peer_datasets.translate(
                part, flavour, video=video, where=f"{where} of `{path}`", own=frozenset([*SET_OPTIONS, *SET_KEYS])
            )
            notes += left
            raw += [(where, t, t, keys, derived) for t, keys, derived in translated]
    if flavour is None:
        _entry(general, path, "`general`", needs_source=False)  # its own keys and values, named as its own
    if ai_toolkit:
        notes = peer_ai_toolkit.job_notes(data) + notes
    return _read_sets(path, raw, flavour, notes)


def _read_sets(path: Path, raw: list, flavour: str | None, notes: list[str]) -> DatasetConfig:
    """The sets of ``raw`` (``(where, options, given, the file's names, Derived)``) read and checked together: names,
    the class set, weights; with the paragraph naming what of another trainer's file was left out."""
    read = [(_entry(m, path, w, needs_source=True, given=g, keys=k), d) for w, m, g, k, d in raw]
    sets = _named([dataclasses.replace(s, derived=d) for s, d in read], path)
    _check_reg(sets, path)
    weighted = [s.name for s in sets if s.weight is not None and not s.is_reg]
    if weighted and len(weighted) != len([s for s in sets if not s.is_reg]):
        raise UserError(
            f"In the dataset config `{path}` the data set(s) {', '.join(f'`{n}`' for n in weighted)} give a `weight` "
            "and the others do not: a weight is the probability that a batch comes from its set, so give one to "
            "every set (they are normalised to sum to 1) or to none (then each set takes its share of the epoch's "
            "samples, repeats counted)."
        )
    note = peer_datasets.ignored_paragraph(path, flavour, notes) if flavour else None
    return DatasetConfig(sets, flavour, note)


def _entry(
    raw: dict[str, Any],
    path: Path,
    where: str,
    *,
    needs_source: bool,
    given: dict | None = None,
    keys: dict | None = None,
) -> DataSet:
    """One set (or ``general``) read: peer names translated, every key known, values coerced and ranged; its
    messages name each option as the file does (``keys``: another trainer's names of its options)."""
    values: dict[str, Any] = {}
    keys = dict(keys or {})
    raw = {k: v for k, v in raw.items() if not (k == "is_reg" and not v)}  # false: an ordinary set, the default
    if raw.get("instance_data_dir") and raw.get("train_data_dir") and raw["instance_data_dir"] != raw["train_data_dir"]:
        raise UserError(
            f"{where} of the dataset config `{path}` gives both `train_data_dir` and `instance_data_dir` "
            "(diffusers' name for it), naming two folders. Give one of them."
        )
    for key, value in raw.items():
        name = PEER_KEYS.get(str(key), str(key))
        if name in values and values[name] != value:
            raise UserError(f"{where} of the dataset config `{path}` gives `{name}` twice (as `{key}` too).")
        values[name] = value
        if name != key:
            keys.setdefault(name, str(key))
    _refuse_keys(values, path, where)
    if "instance_data_dir" in values:
        values.setdefault("train_data_dir", values.pop("instance_data_dir"))
    source = f"{where} of {path}"
    options = {k: coerce(k, v, source) for k, v in values.items() if k in SET_OPTIONS}
    if needs_source:
        own = {PEER_KEYS.get(str(k), str(k)) for k in (given or raw)}
        sources = [k for k in ("train_data_dir", "dataset_name") if options.get(k)]
        if len(sources) != 1:
            named = " and ".join(f"`{k}`" for k in sources) or "neither"
            raise UserError(
                f"{where} of the dataset config `{path}` names {named} of `train_data_dir` and `dataset_name`: each "
                "set reads one source, a folder (`train_data_dir`; musubi-tuner's `image_directory`/`video_directory`, "
                "kohya's `image_dir`, ai-toolkit's `folder_path`) or a dataset (`dataset_name`). Give exactly one."
                + (" (It came from `general`.)" if sources and not own & set(sources) else "")
            )
    return DataSet(
        name=str(values.get("name") or ""),
        options=options,
        repeats=_number(values, "repeats", 1, int, where, path, low=1, keys=keys),
        weight=_number(values, "weight", None, float, where, path, low=0.0, open_low=True),
        loss_weight=_number(values, "loss_weight", 1.0, float, where, path, low=0.0, open_low=True, keys=keys),
        is_reg=_flag(values, "is_reg", where, path),
        keys=keys,
    )


def _flag(values: dict, key: str, where: str, path: Path) -> bool:
    """``values[key]`` as a boolean (``true``/``false``, YAML's or TOML's); one paragraph otherwise."""
    raw = values.get(key, False)
    if not isinstance(raw, bool):
        raise UserError(
            f"`{key}: {raw!r}` in {where} of the dataset config `{path}`: {SET_KEYS[key]}. Give true or false."
        )
    return raw


def _check_reg(sets: list[DataSet], path: Path) -> None:
    """At most one set of class images (``is_reg``), at least one set to train, and no batch weight on the class
    set (it is paired with every batch, never drawn)."""
    reg = [s for s in sets if s.is_reg]
    if len(reg) > 1:
        raise UserError(
            f"The dataset config `{path}` marks {len(reg)} sets `is_reg` ({', '.join(f'`{s.name}`' for s in reg)}); "
            "the class images of prior preservation are one set. Gather them in one folder (kohya `N_words/` "
            "sub-folders keep their repeats), or keep one set `is_reg`."
        )
    if reg and len(reg) == len(sets):
        raise UserError(
            f"The dataset config `{path}` has only class images (`is_reg`); add the set of images to learn."
        )
    if reg and (reg[0].weight is not None or reg[0].loss_weight != 1.0):
        raise UserError(
            f"The `is_reg` set `{reg[0].name}` of the dataset config `{path}` gives a `weight` or `loss_weight`: its "
            "class images are paired with every batch of the other sets (never drawn), their loss weighted by "
            "--prior_loss_weight. Remove them from the set and set --prior_loss_weight."
        )


def _refuse_keys(values: dict[str, Any], path: Path, where: str) -> None:
    """Refuse, in one paragraph, a run-wide option or an unknown key of a set."""
    run_wide = [k for k in values if k in RUN_WIDE]
    if run_wide:
        keys = ", ".join(f"`{k}`" for k in run_wide)
        raise UserError(
            f"{where} of the dataset config `{path}` gives {keys}, which hold(s) for the whole run, not one data set "
            "(the cache, the flips and caption dropout of the batch order, the held-out loss). Give it in --config or "
            "on the command line."
        )
    valid = [*SET_OPTIONS, *SET_KEYS]
    unknown = [k for k in values if k not in valid]
    if unknown:
        hints = []
        for key in unknown:
            close = difflib.get_close_matches(key, valid, n=1, cutoff=0.6)
            hints.append(f"`{key}`" + (f" (did you mean `{close[0]}`?)" if close else ""))
        raise UserError(
            f"{where} of the dataset config `{path}` has unknown key(s) {', '.join(hints)}. A set takes the data "
            f"options {', '.join(f'`{k}`' for k in SET_OPTIONS)} and its own keys "
            + "; ".join(f"`{k}`: {why}" for k, why in SET_KEYS.items())
            + "."
        )


def _number(
    values: dict, key: str, default, kind: type, where: str, path: Path, *, low, open_low: bool = False, keys=None
):
    """``values[key]`` as ``kind`` within its range (``default`` when absent); one paragraph otherwise, naming the
    key as the file does (``keys``) in its syntax."""
    if key not in values or values[key] is None:
        return default
    raw = values[key]
    try:
        if isinstance(raw, bool):
            raise ValueError
        number = kind(raw)
        if kind is int and number != float(raw):
            raise ValueError
    except (TypeError, ValueError):
        number = None
    if number is None or not math.isfinite(number) or number < low or (open_low and number == low):
        bound = f"more than {low:g}" if open_low else f"{low:g} or more"
        given = said((keys or {}).get(key, key), raw, toml=path.suffix.lower() == ".toml")
        raise UserError(
            f"`{given}` in {where} of the dataset config `{path}`: {SET_KEYS[key]}. Give a "
            f"{'whole ' if kind is int else ''}number {bound}."
        )
    return number


def _named(sets: list[DataSet], path: Path) -> list[DataSet]:
    """Every set with a name: its own, else its folder's or dataset's last part; two sets named alike are refused
    when named so, numbered when the names were derived."""
    given = [s.name for s in sets if s.name]
    twice = sorted({n for n in given if given.count(n) > 1})
    if twice:
        raise UserError(
            f"The dataset config `{path}` names two sets `{twice[0]}`; the log, check-data and the summary tell the "
            "sets apart by name. Give each set its own `name`."
        )
    out, taken = [], set(given)
    for i, s in enumerate(sets, 1):
        name = s.name
        if not name:
            source = str(s.options.get("train_data_dir") or s.options.get("dataset_name") or f"set{i}")
            name = Path(source.rstrip("/\\")).name or f"set{i}"
            if name in taken:
                name = f"{name}-{i}"
        taken.add(name)
        out.append(dataclasses.replace(s, name=name))
    return out


def check_data_sets(cfg: TrainConfig) -> None:
    """A dataset config's and prior preservation's checks (``check-data`` runs them as ``train`` does)."""
    if cfg.data.dataset_config:
        _check_dataset_config(cfg)
    _check_prior(cfg)


#: the options of prior preservation's class images, read only with --with_prior_preservation
_CLASS_OPTIONS = ("class_data_dir", "class_prompt", "num_class_images", "sample_batch_size")


def _check_prior(cfg: TrainConfig) -> None:
    """Prior preservation's options: its class folder given, one source of class images, and no class option
    given without it (it would be ignored)."""
    data = cfg.data
    reg = [s.name for s in read_data_sets(data.dataset_config) if s.is_reg] if data.dataset_config else []
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
    """A dataset config's sets read (every key and value checked), each set's options judged for the family as
    its flags would be, and no run-level data source beside them."""
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
    capabilities = families.source().capabilities(cfg.model.family)
    if "VideoQA" in capabilities:
        raise UserError(
            f"`{cfg.model.family}` is a video LLM, which reads one annotation file of conversations; a dataset config "
            f"(`{path}`) lists data sets for the diffusion families. Give the annotation folder as --train_data_dir."
        )
    for i, data_set in enumerate(read_data_sets(path, video="VideoFrames" in capabilities), 1):
        explicit = frozenset(data_set.options)
        probe = dataclasses.replace(cfg, **data_set.options, explicit=explicit)
        where = f"data set {i} of {path}"
        check_applies(probe, lambda name: f"`{data_set.keys.get(name, name)}` in {where}")  # noqa: B023 (this set)
        _check_frame_sizes(cfg, data_set, f"data set {i} (`{data_set.name}`) of {path}")
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


def _check_frame_sizes(cfg: TrainConfig, data_set: DataSet, where: str) -> None:
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
    if cfg.video.frame_buckets:
        raise UserError(
            f"The run's --frame_buckets {cfg.video.frame_buckets} sets every clip's frames and size, so {named} of "
            f"{where} would be ignored. Give the set its own `frame_buckets` (they take the place of the run's), "
            "or drop --frame_buckets from the run."
        )
