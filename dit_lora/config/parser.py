"""Build a :class:`TrainConfig` from a YAML file plus command-line overrides.

The command line wins over YAML; unknown keys and flags are errors that name the closest valid
option; values are coerced to the field's type and checked before any model is loaded. The parts live beside it:
which family (:mod:`.family_choice`), the ``--config`` file (:mod:`.config_file`), the flags
(:mod:`.command_line`) and the checks that need no model (:mod:`.checks`); this module puts them together.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from dit_lora.config import owners
from dit_lora.config.adapter_types import check_type_options
from dit_lora.config.applies import check_applies
from dit_lora.config.checks import validate_static
from dit_lora.config.command_line import (
    NEGATIVE_NUMBER,
    build_argparser,
    every_option_parser,
    print_common_help,
    read_flags,
)
from dit_lora.config.config_file import yaml_of, yaml_values
from dit_lora.config.dataset_config import refuse_two_sources, source_by_level, source_flags, with_data_sets
from dit_lora.config.family_choice import family_of
from dit_lora.config.lycoris_args import network_args_values
from dit_lora.config.schema import DEFAULT_FAMILY, ModelOptions, TrainConfig, config_fields
from dit_lora.config.values import coerce, unknown_options_message
from dit_lora.core.errors import UserError

#: the flags that ask for the help, which comes once the family is known
_HELP = {"-h", "--help"}


def parse_config(
    argv: Sequence[str] | None = None,
    prog: str | None = None,
    *,
    needs_data: bool = True,
    infer_family: Callable[[ModelOptions], str | tuple[str, str]] | None = None,
) -> TrainConfig:
    """Parse ``--config`` YAML plus flag overrides into a validated :class:`TrainConfig`.

    The family comes first: ``--family``, else the YAML's ``family:``, else ``infer_family`` (given the model's
    options, ``cfg.model`` of the common options: e.g. the model's family for ``dit-lora plan``; it may return
    ``(family, what chose it)`` for the messages, e.g. a recipe script's own family), else the schema's default. The
    flags are then the common options plus that family's; another family's flag or YAML key is refused naming its
    owner.
    ``needs_data=False`` (``dit-lora plan``) accepts a configuration without a data source. The command line and
    the YAML are each read once, the inferred family's options checked against what that one reading found.
    """
    argv = list(sys.argv[1:] if argv is None else argv)
    family, chosen_by, yaml_path, data = family_of(argv)
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
        flags, unknown = read_flags(parser, argv)
        values = _family_values(flags, unknown, family, chosen_by, yaml_path, data)
    values["family"] = family
    refuse_two_sources(values, sources, yaml_path)
    common, own = owners.split_values(family, values, source=None)
    # What the user set (YAML or flag): the catalogue's defaults fill only the rest.
    explicit = frozenset(values) - ({"family"} if chosen_by == "the default family" else set())
    options = owners.options_class(family)(**own)
    cfg: TrainConfig = TrainConfig(**common, family_options=options, explicit=explicit, notes=tuple(notes))
    check_applies(cfg.model.family, cfg.explicit, lambda name: _given(name, argv, yaml_path), chosen_by)
    check_type_options(cfg, lambda name: _given(name, argv, yaml_path))
    # a --dataset_config file, not the --config YAML's own `datasets:` list: a run option at its top is refused
    standalone = not yaml_path or Path(cfg.data.dataset_config or "") != Path(yaml_path)
    cfg = with_data_sets(cfg, standalone=standalone)  # the run's one reading of its dataset config
    validate_static(cfg, needs_data=needs_data)
    return cfg


def _parse_inferring(
    argv: list[str],
    yaml_path: str | None,
    data: dict | None,
    prog: str | None,
    needs_data: bool,
    infer_family: Callable[[ModelOptions], str | tuple[str, str]],
) -> tuple[str, str, dict]:
    """(family, what chose it, the options set) when ``infer_family`` picks the family from the model's options.

    One reading of ``argv`` knows every family's flags: the common options decide the family, then the flags and
    YAML keys of the others are checked against that family's options, as a parse for it would have.
    """
    asks_help = bool(_HELP & set(argv))
    flags, extras = read_flags(every_option_parser(prog), [a for a in argv if a not in _HELP])
    if not asks_help:  # an option no family has is wrong whatever the family: say so before any data or model check
        _refuse_unknown(extras, yaml_path, data)
    data = yaml_of(yaml_path, data)
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
        inferred = infer_family(preliminary.model)
    except UserError:
        if asks_help:  # no family to be had (no model named): the common options and how to see a family's
            print_common_help(prog)
        raise
    family, chosen_by = inferred if isinstance(inferred, tuple) else (inferred, "the model's family")
    if asks_help:
        build_argparser(prog, family, families_epilog=True).print_help()
        raise SystemExit(0)
    unknown = _unknown_for(family, argv, flags, extras)
    values = _family_values(flags, unknown, family, chosen_by, yaml_path, data, done=(yaml_common, flag_common))
    return family, chosen_by, values


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
        values.update(yaml_values(yaml_of(yaml_path, data), Path(yaml_path), family, chosen_by, skip=set(done[0])))
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
