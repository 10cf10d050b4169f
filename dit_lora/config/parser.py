"""Build a :class:`TrainConfig` from a YAML file plus command-line overrides.

The command line wins over YAML; unknown keys and flags are errors that name the closest valid
option; values are coerced to the field's type and checked before any model is loaded.
"""

from __future__ import annotations

import argparse
import os
import re
import sys
import typing
from collections.abc import Callable, Sequence
from dataclasses import MISSING, fields
from pathlib import Path
from typing import Any

import yaml

from dit_lora.config import families, owners
from dit_lora.config.adapter_types import check_type_options
from dit_lora.config.applies import check_applies
from dit_lora.config.data_kind import video_llm_data_message
from dit_lora.config.dataset_config import (
    DATASETS_KEY,
    check_data_sets,
    check_standalone,
    refuse_two_sources,
    source_by_level,
    source_flags,
)
from dit_lora.config.lycoris_args import network_args_values
from dit_lora.config.peer_datasets import toml_config_message
from dit_lora.config.peer_files import flavour_of
from dit_lora.config.peers import PEER_FLAGS
from dit_lora.config.schema import DEFAULT_FAMILY, TrainConfig, config_fields
from dit_lora.config.values import base_type, coerce, field_type, option_field, range_message, unknown_options_message
from dit_lora.core.errors import UserError


def load_yaml(path: str | Path, family: str | None = None, chosen_by: str | None = None) -> dict[str, Any]:
    """Read a YAML config for a run of ``family`` (default: the file's own ``family:``, else the schema's);
    errors name the file and the closest valid key, or the family that owns another family's option.
    ``chosen_by`` says what set the family, for that message."""
    data = _read_yaml(path)
    path = Path(path)
    if family is None:
        family, chosen_by = _yaml_family(data, path)
    return _yaml_values(data, path, family, chosen_by)


def _yaml_values(
    data: dict, path: Path, family: str, chosen_by: str | None, skip: set[str] | frozenset[str] = frozenset()
) -> dict[str, Any]:
    """The keys of a YAML mapping checked for a run of ``family`` (another family's key names its owner; every
    unknown key at once), then coerced, except those in ``skip`` (coerced already)."""
    valid = [*owners.common_names(), *(f.name for f in owners.family_fields(family))]
    unknown = []
    for key in data:
        if key not in valid:
            foreign = owners.foreign_option_message(str(key), family, str(path), chosen_by or "--family")
            if foreign:
                raise UserError(foreign)
            unknown.append(str(key))
    if unknown:
        raise UserError(unknown_options_message(unknown, valid, f"in {path}", data.get("network_args")))
    return {k: coerce(k, v, str(path)) for k, v in data.items() if k not in skip}


def _yaml_family(data: dict, path: Path) -> tuple[str, str]:
    """The family a YAML file names (``family:``), else the schema's default; and what chose it."""
    if isinstance(data.get("family"), str) and data["family"]:
        return _canonical(data["family"]), f"`family:` in {path}"
    return DEFAULT_FAMILY, "the default family"


def _canonical(family: str) -> str:
    """The family name ``family`` stands for (an alias's family), as the registry tells it (:mod:`.families`)."""
    return families.source().canonical_name(family)


def _read_yaml(path: str | Path) -> dict[str, Any]:
    """The mapping in a YAML file, unchecked; errors name the file."""
    path = Path(path)
    if not path.is_file():
        raise UserError(f"The config file `{path}` (from --config) does not exist. Check the path.")
    text = path.read_text()
    toml = toml_config_message(path, text, suffix_only=True)  # musubi-tuner's dataset TOML: --dataset_config's
    if toml:
        raise UserError(toml)
    try:
        data = yaml.safe_load(text) or {}
    except yaml.YAMLError as err:
        raise UserError(
            toml_config_message(path, text, suffix_only=False)
            or f"The config file `{path}` is not valid YAML ({err}). Fix the syntax at the position shown."
        ) from None
    peer = flavour_of(data)  # SimpleTuner's backends, OneTrainer's concepts (or its config holding them)
    if peer or not isinstance(data, dict):
        raise UserError(
            f"The config file `{path}` is {peer}'s dataset file, not a run config: pass it as --dataset_config {path} "
            "(its sets are read as they are), with the run's options as flags or in a YAML --config."
            if peer
            else f"The config file `{path}` must be a mapping of option: value, not {type(data).__name__}."
        )
    if _is_ai_toolkit(data):
        raise UserError(ai_toolkit_message(path))
    if DATASETS_KEY in data:  # the sets listed in the run config itself: read as --dataset_config of this file
        if data.get("dataset_config"):
            raise UserError(
                f"The config file `{path}` has both a `datasets:` list and `dataset_config: "
                f"{data['dataset_config']}`; both name the run's data sets. Keep one of them."
            )
        # `general:` beside it is the sets' defaults, read with them (the run's own options are defaults too)
        data = {**{k: v for k, v in data.items() if k not in (DATASETS_KEY, "general")}, "dataset_config": str(path)}
    return data


def _is_ai_toolkit(data: dict) -> bool:
    """An ai-toolkit job file: ``job:``/``config:`` at the top, ``config: {process: [...]}`` (no dit-lora option
    is called ``job``, ``config`` is a flag, never a YAML key)."""
    config = data.get("config")
    return ("job" in data or "config" in data) and isinstance(config, dict) and isinstance(config.get("process"), list)


#: ai-toolkit's main keys (their place in its nested file) and dit-lora's flat option, from :mod:`.peers`
_AI_TOOLKIT_KEYS = (
    "model.name_or_path",
    "datasets[].folder_path",
    "datasets[].caption_ext",
    "network.linear",
    "network.linear_alpha",
    "train.lr",
    "train.steps",
    "train.batch_size",
    "train.dtype",
    "save.save_every",
    "training_folder",
)


def ai_toolkit_message(path: Path) -> str:
    """The paragraph for an ai-toolkit job YAML given as a dit-lora ``--config``: the shape, the main keys'
    counterparts (:data:`.peers.PEER_FLAGS`), the migration page."""
    pairs = []
    for where in _AI_TOOLKIT_KEYS:
        peer = PEER_FLAGS.get(where.rsplit(".", 1)[-1])
        if peer is not None and peer.option:
            pairs.append(f"{where} -> `{peer.option}`")
    return (
        f"The config file `{path}` is an ai-toolkit config (top-level `job`/`config` with a `process` list): "
        "dit-lora's YAML is flat, one `option: value` per line at the top level, the same names as its --flags. "
        f"Rewrite it as such; its main keys map as {', '.join(pairs)}. Its `datasets:` are read as they are with "
        f"--dataset_config {path}. docs/guides/migrating.md lists every ai-toolkit key and its dit-lora option (or "
        "that there is none)."
    )


#: a negative number (``-1e-4``, ``-.5``, ``-inf``) after a flag is its value: argparse's own pattern knows only
#: ``-3`` and ``-0.5`` and takes ``-1e-4`` for an unknown flag ("expected one argument")
NEGATIVE_NUMBER = re.compile(r"^-(\d+\.?\d*|\.\d+)([eE][-+]?\d+)?$|^-(inf|infinity|nan)$", re.IGNORECASE)


def accept_negative_numbers(parser: argparse.ArgumentParser) -> None:
    """Make ``parser`` read ``--flag -1e-4`` as the value ``-1e-4`` (no option of ours looks like a number).

    argparse has no public switch for this; its parsers read ``_negative_number_matcher`` (Python 3.9 to 3.14).
    """
    parser._negative_number_matcher = NEGATIVE_NUMBER


class _Parser(argparse.ArgumentParser):
    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        accept_negative_numbers(self)

    def error(self, message: str):  # argparse would print usage and exit 2 with a terse line
        raise UserError(f"{message}. Run with --help for every option.")


def _default_text(f) -> str:
    if f.default is not MISSING:
        return repr(f.default) if f.default is not None else "unset"
    return repr(f.default_factory())


def check_one_source(train_data_dir: str | os.PathLike | None, dataset_name: str | None, what: str) -> None:
    """Raise the one paragraph for both or neither of --train_data_dir and --dataset_name (``what``: the folder's
    content)."""
    if bool(train_data_dir) == bool(dataset_name):
        both = "both were given" if train_data_dir else "neither was given"
        raise UserError(
            f"Pass exactly one data source: --train_data_dir (a local folder of {what}) or --dataset_name (a Hugging "
            f"Face dataset id or a folder `datasets` can open); {both}."
        )


def build_argparser(
    prog: str | None = None, family: str | None = None, *, families_epilog: bool = False, with_family: bool = True
) -> argparse.ArgumentParser:
    """An argparse parser with one ``--flag`` per common option and per option of ``family`` (default: the
    schema's), the family's under its own section title (values are coerced later). ``families_epilog``: the help
    ends with the registered families (building each: only for ``--help``); ``with_family=False``: the common
    options only (the help of a run whose family is not known yet)."""
    parser = _Parser(
        prog=prog,
        description="LoRA fine-tuning with dit-lora. Options come from --config YAML, overridden by flags."
        + (
            ""
            if with_family
            else " Listed: the options every family has; a family's own options are listed by "
            f"`{prog or 'dit-lora train'} --family NAME --help`."
        ),
        epilog=families_help(prog) if families_epilog else None,
        allow_abbrev=False,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--config", help="YAML file with options (flags override it).")
    groups: dict[str, argparse._ArgumentGroup] = {}
    for f in config_fields():
        section = f.metadata.get("section") or "misc"
        add_config_flag(groups.setdefault(section, parser.add_argument_group(section)), f.name)
    family = family or DEFAULT_FAMILY
    own = owners.family_fields(family) if with_family else []
    if own:
        title = owners.options_class(family).TITLE or f"{family} options"
        group = parser.add_argument_group(title)
        for f in own:
            add_config_flag(group, f.name)
    return parser


def families_help(prog: str | None = None) -> str:
    """The help's last part: each registered family on one line (the pipeline it trains, its recipe script) and
    how to list one family's own options."""
    lines = ["families (--family; default: the config's `family:`, else the model's):"]
    table = families.source()
    for name in table.available():
        lines.append(f"  {name:<18} {table.pipelines_of(name)[0]} ({table.recipe_script(name)})")
    lines.append(f"`{prog or 'dit-lora train'} --family NAME --help` adds that family's own options to this list.")
    return "\n".join(lines)


def _print_common_help(prog: str | None) -> typing.NoReturn:
    """``--help`` before the family is known: the common options by section and the families; exit 0."""
    build_argparser(prog, families_epilog=True, with_family=False).print_help()
    raise SystemExit(0)


def add_config_flag(parser, name: str) -> None:
    """Add ``--<name>`` for the :class:`TrainConfig` field ``name``: its help, default and choices from the schema.

    The value stays a string (None when absent); :func:`coerce` types it. ``dit-lora check-data`` declares
    the options it shares with the recipes through here, so help texts live in one place.
    """
    f = option_field(name)[0]
    tp, _ = base_type(field_type(f.name))
    if isinstance(parser, argparse.ArgumentParser):  # e.g. `dit-lora check-data` (a group shares its parser's)
        accept_negative_numbers(parser)
    choices = f.metadata.get("choices")
    help_text = f"{f.metadata['help']} (default: {_default_text(f)})"
    if choices:
        help_text += f" [choices: {', '.join(choices)}]"
    if f.metadata.get("valid") is not None:
        help_text += f" [valid: {f.metadata['valid']}]"
    if f.metadata.get("applies") is not None:
        help_text += f" [{f.metadata['applies'].kind} only]"
    if tp is bool:
        # `--flag` alone means true; `--flag false` is also accepted.
        parser.add_argument(f"--{f.name}", nargs="?", const="true", default=None, help=help_text, metavar="BOOL")
    elif f.metadata.get("joined_by"):  # given more than once: every value kept (joined by the config)
        parser.add_argument(f"--{f.name}", action="append", default=None, help=help_text, metavar="TEXT")
    elif typing.get_origin(tp) is list:
        parser.add_argument(f"--{f.name}", nargs="+", default=None, help=help_text, metavar="PATTERN")
    else:
        metavar = getattr(tp, "__name__", "VALUE").upper()
        parser.add_argument(f"--{f.name}", default=None, help=help_text, metavar=metavar)


def parse_config(
    argv: Sequence[str] | None = None,
    prog: str | None = None,
    *,
    needs_data: bool = True,
    infer_family: Callable[[TrainConfig], str | tuple[str, str]] | None = None,
) -> TrainConfig:
    """Parse ``--config`` YAML plus flag overrides into a validated :class:`TrainConfig`.

    The family comes first: ``--family``, else the YAML's ``family:``, else ``infer_family`` (given the common
    options, e.g. the model's family for ``dit-lora plan``; it may return ``(family, what chose it)`` for the
    messages, e.g. a recipe script's own family), else the schema's default. The flags are then the
    common options plus that family's; another family's flag or YAML key is refused naming its owner.
    ``needs_data=False`` (``dit-lora plan``) accepts a configuration without a data source. The command line and
    the YAML are each read once, the inferred family's options checked against what that one reading found.
    """
    argv = list(sys.argv[1:] if argv is None else argv)
    family, chosen_by, yaml_path, data = _family_of(argv)
    sources = source_flags(argv)  # a data source on the command line takes the place of the file's
    notes: list[str] = []
    if data is not None and yaml_path:
        data, notes = source_by_level(data, sources, yaml_path)
    if family is None and infer_family is None:
        family, chosen_by = DEFAULT_FAMILY, "the default family"
    if family is None:
        assert infer_family is not None  # no family and nothing to infer it: the default family, above
        family, chosen_by, values = _parse_inferring(argv, yaml_path, data, prog, needs_data, infer_family)
    else:
        parser = build_argparser(prog, family, families_epilog=bool(_HELP & set(argv)))
        flags, unknown = _read_flags(parser, argv)
        values = _family_values(flags, unknown, family, chosen_by, yaml_path, data)
    values["family"] = family
    refuse_two_sources(values, sources, yaml_path)
    common, own = owners.split_values(family, values, source=None)
    # What the user set (YAML or flag): the catalogue's defaults fill only the rest.
    explicit = frozenset(values) - ({"family"} if chosen_by == "the default family" else set())
    options = owners.options_class(family)(**own)
    cfg: TrainConfig = TrainConfig(**common, family_options=options, explicit=explicit, notes=tuple(notes))
    check_applies(cfg, lambda name: _given(name, argv, yaml_path), chosen_by)
    check_type_options(cfg, lambda name: _given(name, argv, yaml_path))
    if cfg.data.dataset_config and (not yaml_path or Path(cfg.data.dataset_config) != Path(yaml_path)):
        check_standalone(cfg.data.dataset_config)
    validate_static(cfg, needs_data=needs_data)
    return cfg


def _parse_inferring(
    argv: list[str],
    yaml_path: str | None,
    data: dict | None,
    prog: str | None,
    needs_data: bool,
    infer_family: Callable[[TrainConfig], str | tuple[str, str]],
) -> tuple[str, str, dict]:
    """(family, what chose it, the options set) when ``infer_family`` picks the family from the common options.

    One reading of ``argv`` knows every family's flags: the common options decide the family, then the flags and
    YAML keys of the others are checked against that family's options, as a parse for it would have.
    """
    asks_help = bool(_HELP & set(argv))
    flags, extras = _read_flags(_every_option_parser(prog), [a for a in argv if a not in _HELP])
    if not asks_help:  # an option no family has is wrong whatever the family: say so before any data or model check
        _refuse_unknown(extras, yaml_path, data)
    data = _yaml_of(yaml_path, data)
    common = owners.common_names()
    yaml_common = {k: coerce(k, v, str(yaml_path)) for k, v in data.items() if k in common}
    flag_common = _coerced_flags(flags, [f.name for f in config_fields()])
    refuse_two_sources({**yaml_common, **flag_common}, source_flags(argv), yaml_path)  # before the checks below
    preliminary: TrainConfig = TrainConfig(
        **yaml_common, **flag_common, explicit=frozenset({*yaml_common, *flag_common})
    )
    if not asks_help:  # the help comes first, once the family is known
        validate_static(preliminary, needs_data=needs_data)
    try:
        inferred = infer_family(preliminary)
    except UserError:
        if asks_help:  # no family to be had (no model named): the common options and how to see a family's
            _print_common_help(prog)
        raise
    family, chosen_by = inferred if isinstance(inferred, tuple) else (inferred, "the model's family")
    if asks_help:
        build_argparser(prog, family, families_epilog=True).print_help()
        raise SystemExit(0)
    unknown = _unknown_for(family, argv, flags, extras)
    values = _family_values(flags, unknown, family, chosen_by, yaml_path, data, done=(yaml_common, flag_common))
    return family, chosen_by, values


def _every_option_parser(prog: str | None) -> argparse.ArgumentParser:
    """The parser of the common options plus every registered family's (a run whose family is not known yet)."""
    parser = build_argparser(prog, with_family=False)
    group = parser.add_argument_group("family options")
    for name in owners.all_option_names():
        if name not in owners.common_names():
            add_config_flag(group, name)
    return parser


def _read_flags(parser: argparse.ArgumentParser, argv: list[str]) -> tuple[dict[str, str], list[str]]:
    """The one argparse pass: the raw value of each option given in ``argv`` and the arguments ``parser`` does not
    know, in order (``--help`` prints the help and exits here)."""
    args, unknown = parser.parse_known_args(argv)
    given = {name: raw for name, raw in vars(args).items() if raw is not None and name != "config"}
    return given, unknown


def _unknown_for(family: str, argv: list[str], flags: dict[str, str], extras: list[str]) -> list[str]:
    """The arguments a parser of ``family``'s options would have left unknown, in ``argv``'s order: ``extras``
    (no family knows them) and the flags of other families' options that the reading of every option took."""
    mine = owners.common_names() | {f.name for f in owners.family_fields(family)}
    foreign = {name for name in flags if name not in mine}
    if not foreign:
        return extras
    pending, ordered = list(extras), []
    for arg in argv:
        if pending and arg == pending[0]:
            ordered.append(pending.pop(0))
        elif arg.startswith("--") and arg[2:].split("=")[0] in foreign:
            ordered.append(arg)
    return ordered + pending


def _family_values(
    flags: dict[str, str],
    unknown: list[str],
    family: str,
    chosen_by: str,
    yaml_path: str | None,
    data: dict | None,
    done: tuple[dict, dict] = ({}, {}),
) -> dict[str, Any]:
    """The options set for a run of ``family``, coerced (flags win over the YAML): the unknown arguments refused
    first, then the YAML's keys, then the flags' values. ``done``: the YAML's and the flags' options already
    coerced (the common ones, when they inferred the family)."""
    own = [f.name for f in owners.family_fields(family)]
    _refuse_for_family(unknown, family, chosen_by, own)
    values: dict[str, Any] = dict(done[0])
    if yaml_path:
        values.update(_yaml_values(_yaml_of(yaml_path, data), Path(yaml_path), family, chosen_by, skip=set(done[0])))
    values.update(done[1])
    names = [f.name for f in config_fields() if f.name not in done[1]] + own
    values.update(_coerced_flags(flags, names))
    return values


def _coerced_flags(flags: dict[str, str], names: Sequence[str]) -> dict[str, Any]:
    """The flags among ``names`` that were given, coerced to their types, in the order of ``names``."""
    return {name: coerce(name, flags[name], f"--{name}") for name in names if name in flags}


def _refuse_for_family(unknown: list[str], family: str, chosen_by: str, own: list[str]) -> None:
    """Raise one paragraph for the arguments a run of ``family`` does not know: another family's option (naming
    it), a value without its option, or unknown flags (all of them, each with its hint)."""
    if not unknown:
        return
    bad = next((u for u in unknown if u.startswith("-")), unknown[0])
    foreign = owners.foreign_option_message(bad.split("=")[0].lstrip("-"), family, "--", chosen_by)
    if foreign and bad.startswith("--"):
        raise UserError(foreign)
    if not bad.startswith("-"):
        raise UserError(
            f"Unexpected argument `{bad}` on the command line: every value follows its --option. "
            "Run with --help for every valid option."
        )
    flags = [u for u in unknown if u.startswith("-") and not NEGATIVE_NUMBER.match(u)]  # all, each hinted
    valid = [*owners.common_names(), *own, "config"]
    raise UserError(unknown_options_message(flags, valid, "on the command line", network_args_values(unknown)))


def _given(name: str, argv: Sequence[str], yaml_path: str | None) -> str:
    """How option ``name`` was set: ``--name`` (a flag, which wins) or ``name in the YAML path``."""
    if any(a == f"--{name}" or a.startswith(f"--{name}=") for a in argv) or not yaml_path:
        return f"--{name}"
    return f"`{name}` in {yaml_path}"


def named_family(argv: Sequence[str]) -> str | None:
    """The family ``--family`` or the ``--config`` YAML's ``family:`` names (None: neither), as :func:`parse_config`
    reads it; for an entry point that checks the name before the whole parse (e.g. a recipe script's)."""
    return _family_of(list(argv))[0]


def _family_of(argv: list[str]) -> tuple[str | None, str, str | None, dict | None]:
    """(family, what chose it, --config path, the YAML's mapping) from ``--family`` or the YAML's ``family:``
    (family None: neither; mapping None: no readable YAML, whose error the parse reports in its turn)."""
    peek = argparse.ArgumentParser(add_help=False, allow_abbrev=False)
    peek.add_argument("--family", default=None)
    peek.add_argument("--config", default=None)
    accept_negative_numbers(peek)
    try:
        known, _ = peek.parse_known_args(argv)
    except SystemExit:  # e.g. `--family` without a value: the full parser says so
        return None, "--family", None, None
    data = None
    if known.config and Path(known.config).is_file():
        try:
            data = _read_yaml(known.config)
        except UserError:
            data = None  # the parse reports the bad file
    if known.family is not None:
        return str(coerce("family", _canonical(known.family), "--family")), "--family", known.config, data
    if data is not None and isinstance(data.get("family"), str) and data["family"]:
        return _canonical(data["family"]), f"`family:` in {Path(known.config)}", known.config, data
    return None, "", known.config, data


def _yaml_of(yaml_path: str | None, data: dict | None) -> dict[str, Any]:
    """The mapping of the ``--config`` YAML at ``yaml_path``: ``data`` when it was read already, else read now (its
    errors raised)."""
    if not yaml_path:
        return {}
    return data if data is not None else _read_yaml(yaml_path)


_HELP = {"-h", "--help"}


def _refuse_unknown(unknown: list[str], yaml_path: str | None, data: dict | None) -> None:
    """Raise the paragraph for the first flag (in ``unknown``) or ``--config`` YAML key (``data``: its mapping, None
    when unreadable) that no family has (another family's option waits for the family to be known: its message
    names the owner)."""
    known = set(owners.all_option_names()) | {"config"}
    flags = [arg for arg in unknown if arg.startswith("--") and arg.split("=")[0][2:] not in known]
    if flags:
        words = network_args_values(unknown)  # kohya's words, said as dit-lora's flags
        raise UserError(unknown_options_message(flags, sorted(known), "on the command line", words))
    if yaml_path and data is not None:
        keys = [str(key) for key in data if str(key) not in known]
        if keys:
            yaml_words = data.get("network_args")
            raise UserError(unknown_options_message(keys, sorted(known - {"config"}), f"in {yaml_path}", yaml_words))


def validate_static(cfg: TrainConfig, *, needs_data: bool = True) -> None:
    """Checks that need no model or data: ranges and combinations of options, and optional packages (not for
    ``dit-lora plan``, ``needs_data=False``: it plans a run on a GPU it need not be on, with no package imported:
    the run checks them where it starts)."""
    check_ranges(cfg)
    check_combinations(cfg, needs_data=needs_data)
    if needs_data:
        check_optional_packages(cfg)


def check_ranges(cfg: TrainConfig) -> None:
    """Every numeric option finite and inside its range (``valid`` in the schema), however the config was made:
    the common options, then the family's."""
    for f in config_fields():
        message = range_message(f.name, cfg.option(f.name))
        if message is not None:
            raise UserError(message)
    for f in fields(cfg.family_options):
        message = range_message(f.name, getattr(cfg.family_options, f.name))
        if message is not None:
            raise UserError(message)


def check_combinations(cfg: TrainConfig, *, needs_data: bool = True) -> None:
    """Options that exclude or need each other: frame buckets, fp16, the model and data source, the Hub."""
    if cfg.video.frame_buckets:
        clash = [f"--{n}" for n in ("max_num_frames", "height", "width") if getattr(cfg.video, n) is not None]
        if clash:
            raise UserError(
                f"--frame_buckets {cfg.video.frame_buckets} sets every clip's frames and size, so {', '.join(clash)} would "
                f"be ignored. Remove {' and '.join(clash)}, or drop --frame_buckets to train one size."
            )
    _check_optimizer(cfg)
    if cfg.training.mixed_precision == "fp16" and not cfg.training.allow_fp16:
        raise UserError(
            "--mixed_precision fp16 is refused: fp16 overflows (65504 max) inside Sana's linear attention and "
            "Gemma/Mistral activations, the root cause of the NaN losses reported for Sana and VideoChat2. Use "
            "--mixed_precision bf16 (the default; same memory, fp32 range). If your GPU has no bf16 and you "
            "accept the risk, add --allow_fp16 (a GradScaler is then used)."
        )
    if cfg.training.mixed_precision == "fp16":
        import torch

        if not torch.cuda.is_available():
            raise UserError(
                "--mixed_precision fp16 --allow_fp16 needs a CUDA GPU (fp16 autocast and GradScaler are GPU "
                "features). Use --mixed_precision bf16, which also works on CPU."
            )
    if not cfg.model.pretrained_model_name_or_path:
        family_given = cfg.is_set("family")  # a config built in code: a family off the default counts as set
        video_llm = None if family_given else video_llm_data_message(cfg.data.train_data_dir)
        if video_llm:  # not "a local diffusers folder": the data says a video LLM trains it
            raise UserError(video_llm)
        raise UserError(
            "No model given: set --pretrained_model_name_or_path to a Hub id (e.g. "
            "Efficient-Large-Model/Sana_1600M_1024px_BF16_diffusers) or a local diffusers folder."
        )
    if not cfg.data.dataset_config and not cfg.model.demo and needs_data:
        check_one_source(cfg.data.train_data_dir, cfg.data.dataset_name, "images or videos with captions")
    check_data_sets(cfg)
    if cfg.data.validation_split is not None and cfg.data.validation_data_dir:
        raise UserError(
            f"--validation_split {cfg.data.validation_split:g} and --validation_data_dir `{cfg.data.validation_data_dir}` both "
            "name the held-out samples of the validation loss: the split holds out part of the training data, the "
            "folder is a separate data set. Give one of them."
        )
    check_output_name(cfg.training.output_name)
    if cfg.validation.validation_epochs is not None and cfg.is_set("validation_steps"):
        raise UserError(
            f"--validation_epochs {cfg.validation.validation_epochs} and --validation_steps "
            f"{cfg.validation.validation_steps} both say how often to validate. Give one of them."
        )
    if cfg.hub.push_later_ok and not cfg.hub.push_to_hub:
        # Accepting it would let a user believe the run pushes later, when nothing is pushed at all.
        raise UserError(
            "--push_later_ok only says what --push_to_hub does when the start-of-run check finds that the push "
            "cannot happen, but --push_to_hub is off, so nothing would be pushed. Add --push_to_hub (with "
            "--hub_model_id) to upload the adapter at the end, or drop --push_later_ok."
        )


#: the names dit-lora's own files use: a named copy of one of them would be taken for (or replace) that file
RESERVED_NAMES = ("pytorch_lora_weights", "adapter_model", "dit_lora_backbone")


def _check_optimizer(cfg: TrainConfig) -> None:
    """--optimizer prodigy, adafactor, came, adamw8bit or adamw4bit takes neither bitsandbytes' 8-bit AdamW nor
    fp16's gradient scaler (which steps an optimizer by reading its inf check on the host); the --prodigy_*,
    --adafactor_* and --came_* options need their optimizer, and the --adam_* options an optimizer that reads them
    (never accepted and then ignored)."""
    name = cfg.training.optimizer
    for owner, options in OPTIMIZER_OPTIONS.items():
        given = [f"--{o}" for o in options if cfg.is_set(o)]
        if owner != name and given:
            raise UserError(
                f"{', '.join(given)} set{'s' if len(given) == 1 else ''} {OPTIMIZER_TITLES[owner]}, but the optimizer "
                f"is {name}, which never reads {'it' if len(given) == 1 else 'them'}. Add --optimizer {owner}, or drop "
                f"{'the option' if len(given) == 1 else 'them'}."
            )
    if name == "adamw":
        return
    _check_adam_options(cfg, name)
    title = OPTIMIZER_TITLES[name]
    if cfg.training.use_8bit_adam:
        fix = (
            f"Drop --use_8bit_adam: {title} is the 8-bit AdamW the guard skips on the device without a host sync"
            if name == "adamw8bit"
            else f"Drop --use_8bit_adam to train with {title}, or --optimizer {name} for the 8-bit AdamW"
        )
        raise UserError(
            f"--use_8bit_adam and --optimizer {name} ask for two optimizers: --use_8bit_adam is bitsandbytes' 8-bit "
            f"AdamW. {fix}."
        )
    if cfg.training.mixed_precision == "fp16":
        raise UserError(
            f"--optimizer {name} with --mixed_precision fp16: fp16's gradient scaler decides each step on the host, "
            f"which {title}'s device-side skip does not go through (not verified). Use bf16 (the default) or no."
        )


def _check_adam_options(cfg: TrainConfig, name: str) -> None:
    """Adafactor reads none of --adam_beta1, --adam_beta2 and --adam_epsilon, CAME no --adam_epsilon (its two are
    its own): given, they are refused."""
    unread = {"adafactor": ("adam_beta1", "adam_beta2", "adam_epsilon"), "came": ("adam_epsilon",)}.get(name, ())
    adam = [f"--{o}" for o in unread if cfg.is_set(o)]
    if name == "adafactor" and adam:
        raise UserError(
            f"{', '.join(adam)} with --optimizer adafactor: Adafactor has no Adam betas or epsilon (of the --adam_* "
            "options it reads only --adam_weight_decay). Drop them; --adafactor_beta1 gives it a first moment, "
            "--adafactor_decay_rate sets how its second moments decay."
        )
    if name == "came" and adam:
        raise UserError(
            "--adam_epsilon with --optimizer came: CAME has no Adam epsilon; its two floors (1e-30 under the "
            "squared gradients, 1e-16 under the instability) are came-pytorch's defaults, not options. Drop it; "
            "--adam_beta1, --adam_beta2 and --came_beta3 are its betas."
        )


#: the options only one --optimizer reads
OPTIMIZER_OPTIONS = {
    "prodigy": ("prodigy_beta3", "prodigy_decouple", "prodigy_use_bias_correction", "prodigy_safeguard_warmup"),
    "adafactor": ("adafactor_scale_parameter", "adafactor_beta1", "adafactor_clip_threshold", "adafactor_decay_rate"),
    "came": ("came_beta3", "came_clip_threshold"),
}
#: each --optimizer's name in messages
OPTIMIZER_TITLES = {
    "adamw": "AdamW",
    "prodigy": "Prodigy",
    "adafactor": "Adafactor",
    "came": "CAME",
    "adamw8bit": "torchao's 8-bit AdamW",
    "adamw4bit": "torchao's 4-bit AdamW",
}


def check_output_name(name: str | None) -> None:
    """``--output_name``: a plain file name without its extension (the copy is ``NAME.safetensors`` in --output_dir),
    refused in one paragraph otherwise."""
    if name is None:
        return
    problem = None
    if not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9 ._+-]*", name) or name.endswith("."):
        problem = "is not a plain file name (letters, digits, space, `.`, `_`, `+` and `-`, not starting with a dot)"
    elif name.lower().endswith(".safetensors"):
        problem = "ends with .safetensors, which the copy adds itself"
    elif name.lower() in RESERVED_NAMES or name.lower().startswith(tuple(n + "_" for n in RESERVED_NAMES)):
        problem = "is a name of dit-lora's own files"
    if problem:
        stem = Path(name).name.removesuffix(".safetensors") or "my-lora"
        raise UserError(
            f"--output_name `{name}` {problem}. It names the adapter's copy NAME.safetensors in --output_dir (and "
            f"NAME_comfyui..., NAME_ema...); give a file name without its extension, e.g. --output_name {stem}."
        )


def check_optional_packages(cfg: TrainConfig) -> None:
    """Packages that only some options need (wandb, bitsandbytes, torchao), imported to prove they work here."""
    if cfg.validation.report_to == "wandb":
        try:
            import wandb  # noqa: F401
        except ImportError:
            raise UserError(
                "--report_to wandb needs the `wandb` package: `pip install wandb`, or use --report_to tensorboard."
            )
    if cfg.training.use_8bit_adam:
        try:
            import bitsandbytes  # noqa: F401
            import torch

            if not torch.cuda.is_available():
                raise ImportError("no CUDA device")
        except Exception as err:  # bitsandbytes raises various errors without CUDA
            raise UserError(
                f"--use_8bit_adam needs bitsandbytes on a CUDA GPU ({type(err).__name__}: {err}). Install the "
                "`quant` extra (`pip install dit-lora[quant]`) on a GPU machine, or drop --use_8bit_adam."
            )
    if cfg.training.optimizer in ("adamw8bit", "adamw4bit"):
        try:
            from torchao.optim import AdamW4bit, AdamW8bit  # noqa: F401
        except Exception as err:
            raise UserError(
                f"--optimizer {cfg.training.optimizer} needs torchao's low-bit AdamW ({type(err).__name__}: {err}). "
                "Install the `quant` extra (`pip install 'dit-lora[quant]' -c constraints.txt`: torchao 0.18), or "
                "use --optimizer adamw."
            )
