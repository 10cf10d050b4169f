"""The one reader of a dataset config (``--dataset_config FILE``, or a ``datasets:`` list in the ``--config`` YAML):
the file read from disk and parsed into typed sets, once per run (:func:`~.dataset_config.with_data_sets` at setup,
which the parser and ``check-data`` call; the run then reads ``cfg.data_sets``).

A dataset config is a YAML or TOML file with a ``datasets`` list, each set keyed by the data options a single run
takes under their own names (:data:`SET_OPTIONS`: ``train_data_dir`` or ``dataset_name``, ``resolution``,
``caption_extension``, ``instance_prompt``, frame options, ...) plus its own keys (:data:`SET_KEYS`): ``name``,
``repeats``, ``weight`` (the probability a batch comes from it) and ``loss_weight``. An optional ``general``
mapping (musubi-tuner's and kohya's sd-scripts' ``[general]``) gives every set its defaults. Options that hold for
the whole run (``random_flip``, ``cache_dir``, ``validation_split``, ...) stay run options: given in a set they are
refused, naming where they belong. Other trainers' files are read as theirs read them (:mod:`.peer_files`,
:mod:`.peer_datasets`). Every refusal is one paragraph naming the file, the set and the key.

:mod:`.dataset_config` judges the sets against the run's options; :mod:`dit_lora.data.data_sets` screens, caches and
mixes them.
"""

from __future__ import annotations

import dataclasses
import difflib
import json
import math
import tomllib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from dit_lora.config import peer_ai_toolkit, peer_datasets, peer_files, peer_musubi
from dit_lora.config.set_keys import said
from dit_lora.config.values import coerce
from dit_lora.core.errors import UserError

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


def _read_file(path: Path) -> Any:
    """The parsed dataset config: YAML, TOML by its ``.toml`` suffix, JSON by ``.json``; a mapping, or a list when it
    is another trainer's (SimpleTuner's backends, OneTrainer's concepts: :mod:`.peer_files`); errors name the file."""
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


def _check_standalone(data: Any, path: Path) -> None:
    """A ``--dataset_config`` file (not the run's ``--config``) holds only ``general`` and ``datasets``: a run option
    at its top would be ignored, so it is refused naming where it belongs."""
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
    trainer's file was left out (None: nothing); the file it was read from, and whether for a family that trains
    clips (``video``: how another trainer's sizes map)."""

    sets: list[DataSet]
    flavour: str | None = None
    note: str | None = None
    path: str = ""
    video: bool = False

    def read_from(self, path: str | Path, video: bool) -> bool:
        """Whether this is the dataset config at ``path`` read for a family that trains clips (``video``) or not."""
        return Path(self.path) == Path(path) and self.video == video


def read_data_sets(path: str | Path, *, video: bool = False) -> list[DataSet]:
    """The sets of the dataset config at ``path`` (:func:`read_dataset_config`)."""
    return read_dataset_config(path, video=video).sets


def read_dataset_config(path: str | Path, *, video: bool = False, standalone: bool = False) -> DatasetConfig:
    """The dataset config at ``path`` (a ``--dataset_config`` file, a ``--config`` YAML with a ``datasets:`` list,
    musubi-tuner's TOML or an ai-toolkit job YAML) read from disk, each set checked: known keys, values of the
    option's type, one data source, repeats, weights. ``video``: the run's family trains clips (how another trainer's
    sizes map). ``standalone``: a ``--dataset_config`` file, not the run's ``--config`` YAML, so a run option at its
    top is refused. The only function that reads the file: a run reads it once, at setup
    (:func:`~.dataset_config.with_data_sets`)."""
    path = Path(path)
    data = _read_file(path)
    if standalone:
        _check_standalone(data, path)
    return dataclasses.replace(_parsed(data, path, video), path=str(path), video=video)


def _parsed(data: Any, path: Path, video: bool) -> DatasetConfig:
    """The sets of the file's contents ``data`` (:func:`_read_file`), dit-lora's own or another trainer's."""
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
