"""Build a :class:`TrainConfig` from a YAML file plus command-line overrides.

The command line wins over YAML; unknown keys and flags are errors that name the closest valid
option; values are coerced to the field's type and checked before any model is loaded.
"""

from __future__ import annotations

import argparse
import difflib
import functools
import math
import re
import sys
import types
import typing
from dataclasses import MISSING, fields
from pathlib import Path
from typing import Any, Callable, Sequence

import yaml

from dit_lora.core.errors import UserError
from dit_lora.config import owners
from dit_lora.config.applies import check_applies
from dit_lora.config.peers import peer_hint
from dit_lora.config.schema import DEFAULT_FAMILY, TrainConfig, config_fields


@functools.lru_cache(maxsize=None)  # resolving the annotations is most of a parse's time; they never change
def _hints(cls: type) -> dict[str, Any]:
    return typing.get_type_hints(cls)


def _field_types() -> dict[str, Any]:
    """Every option's declared type: the common ones and every known family's."""
    return {name: _field_type(name) for name in owners.all_option_names()}


def _field_type(name: str) -> Any:
    f, cls = _option(name)
    return _hints(cls)[f.name]


def _option(name: str):
    """(field, declaring class) of option ``name``, common or a family's."""
    found = owners.find_field(name)
    if found is None:
        raise KeyError(name)
    return found


def _base_type(tp: Any) -> tuple[Any, bool]:
    """Return (inner type, optional?) for ``X | None`` annotations."""
    origin = typing.get_origin(tp)
    if origin in (typing.Union, types.UnionType):
        args = [a for a in typing.get_args(tp) if a is not type(None)]
        return args[0], True
    return tp, False


def _suggest(name: str, valid: Sequence[str]) -> str:
    close = difflib.get_close_matches(name, list(valid), n=1, cutoff=0.5)
    return f" Did you mean `{close[0]}`?" if close else ""


def unknown_message(name: str, valid: Sequence[str], where: str) -> str:
    """The one paragraph for an unknown option ``name`` (no family has it): another trainer's name gets its
    dit-lora counterpart or "no equivalent" (:mod:`.peers`), anything else the closest of ``valid`` (the run's
    option names). ``where``: ``on the command line`` or ``in run.yaml``."""
    bare = name.split("=")[0].lstrip("-")
    flag = where == "on the command line"
    hint = _unknown_hint(bare, valid, flag)
    return (f"Unknown option `{'--' if flag else ''}{bare}` {where}.{f' {hint}' if hint else ''} Run with --help "
            "for every valid option.")


def _unknown_hint(bare: str, valid: Sequence[str], flag: bool) -> str:
    """Another trainer's counterpart of option ``bare`` (:mod:`.peers`), else the closest of ``valid``, else ""."""
    hint = peer_hint(bare, valid)
    if hint is None:
        close = difflib.get_close_matches(bare, list(valid), n=1, cutoff=0.5)
        hint = f"Did you mean `{'--' if flag else ''}{close[0]}`?" if close else ""
    return hint


def unknown_options_message(names: Sequence[str], valid: Sequence[str], where: str) -> str:
    """One paragraph for every unknown option in ``names`` at once (a config from another trainer has several:
    one per run would take as many runs to fix), each with its hint; one name is :func:`unknown_message`."""
    if len(names) == 1:
        return unknown_message(names[0], valid, where)
    flag = where == "on the command line"
    items = []
    for name in names:
        bare = name.split("=")[0].lstrip("-")
        hint = _unknown_hint(bare, valid, flag)
        items.append(f"`{'--' if flag else ''}{bare}`{f' ({hint.rstrip(chr(46))})' if hint else ''}")
    return (f"{len(items)} unknown options {where}: {'; '.join(items)}. Fix or remove each of them; run with --help "
            "for every valid option.")


_TRUE = {"1", "true", "yes", "on", "y"}
_FALSE = {"0", "false", "no", "off", "n"}


def coerce(name: str, value: Any, source: str) -> Any:
    """Convert ``value`` to the declared type of field ``name``; errors name the field and source."""
    tp, optional = _base_type(_field_type(name))
    meta = _option(name)[0].metadata
    if value is None or (optional and isinstance(value, str) and value.lower() in ("none", "null", "")):
        if optional:
            return None
        raise UserError(f"`{name}` in {source} cannot be empty; remove it to use the default.")
    try:
        if tp is bool:
            if isinstance(value, bool):
                return value
            text = str(value).strip().lower()
            if text in _TRUE:
                return True
            if text in _FALSE:
                return False
            raise ValueError
        if typing.get_origin(tp) is list:
            if isinstance(value, str):
                value = [v.strip() for v in value.split(",") if v.strip()]
            if not isinstance(value, (list, tuple)):
                raise ValueError
            return [str(v) for v in value]
        if tp in (int, float):
            number = _to_number(value, tp)
            check_value(name, number, source, raw=value)
            return number
        if tp is str:
            value = str(value)
            choices = meta.get("choices")
            if choices and value not in choices:
                raise UserError(
                    f"`{name}` in {source} is `{value}`, which is not one of {', '.join(choices)}."
                    f"{_suggest(value, choices)} Pick one of those values."
                )
            return value
    except (TypeError, ValueError, OverflowError):
        pass
    pretty = getattr(tp, "__name__", str(tp))
    raise UserError(
        f"`{name}` in {source} is {value!r}, which is not a valid {pretty}. "
        f"Give {'an' if pretty[0] in 'aeiou' else 'a'} {pretty}"
        f"{' (comma-separated for a list)' if typing.get_origin(tp) is list else ''}."
        f"{_LIST_HINTS.get(name, '') if isinstance(value, (list, tuple)) else ''}"
    )


#: what a list means for a one-value option in the trainers people come from (the sentence after the type error)
_LIST_HINTS = {
    "resolution": " dit-lora trains at one --resolution (one side in pixels) and aspect-ratio buckets "
                  "(--aspect_buckets, `auto` by default) hold every image near its square's pixel count; "
                  "ai-toolkit's list of resolutions (training at several sizes) has no dit-lora equivalent: "
                  "pick one, e.g. the largest.",
}


def _to_number(value: Any, tp: type) -> int | float:
    """``value`` (a YAML number or the text of a flag) as ``tp``; non-finite values pass through to the range check.

    An int option takes ``3``, ``3.0`` and ``1e3`` (YAML reads ``1e3`` as text), not ``2.5``.
    """
    if isinstance(value, bool) or not isinstance(value, (int, float, str)):
        raise ValueError
    if isinstance(value, str):
        text = value.strip()
        try:
            return int(text) if tp is int else float(text)
        except ValueError:
            value = float(text)  # "1e3" for an int, "nan", "inf"; anything else raises ValueError
    if tp is float or not math.isfinite(value):
        return float(value)
    if isinstance(value, float) and not value.is_integer():
        raise ValueError
    return int(value)


def _where(source: str | None) -> str:
    if source is None:
        return ""
    return " on the command line" if source.startswith("--") else f" in {source}"


def range_message(name: str, value: Any, source: str | None = None, shown: str | None = None) -> str | None:
    """The one paragraph for a numeric option outside its range (``None`` when ``value`` is valid).

    ``source`` is where the value came from: ``--name`` (the command line), a YAML path, or None (the config);
    ``shown`` is the value as the user wrote it (``-1e-4`` rather than ``-0.0001``).
    """
    f = _option(name)[0]
    rule = f.metadata.get("valid")
    if rule is None or isinstance(value, bool) or not isinstance(value, (int, float)) or value in rule:
        return None
    kind = "an integer" if _base_type(_field_type(name))[0] is int else "a number"
    wanted = f"{kind} {rule}" if str(rule) != "finite" else f"a finite {kind.split()[-1]}"
    problem = "" if math.isfinite(value) else ", not a finite number"
    why = f": {rule.why}" if rule.why else ""
    if isinstance(f.default, (int, float)) and not isinstance(f.default, bool) and f.default in rule:
        fix = f"or leave it out for the default ({f.default})"
    else:
        fix = "or leave it out (unset)"
    return (f"--{name} is {shown or value}{problem}; it must be {wanted}{why}. Set it{_where(source)} to "
            f"{wanted}, {fix}.")


def check_value(name: str, value: Any, source: str | None, raw: Any = None) -> None:
    """Raise the paragraph of :func:`range_message` when ``value`` is outside the range of option ``name``."""
    shown = raw.strip() if isinstance(raw, str) and raw.strip() else None
    message = range_message(name, value, source, shown)
    if message is not None:
        raise UserError(message)


def load_yaml(path: str | Path, family: str | None = None, chosen_by: str | None = None) -> dict[str, Any]:
    """Read a YAML config for a run of ``family`` (default: the file's own ``family:``, else the schema's);
    errors name the file and the closest valid key, or the family that owns another family's option.
    ``chosen_by`` says what set the family, for that message."""
    data = _read_yaml(path)
    path = Path(path)
    if family is None:
        family, chosen_by = _yaml_family(data, path)
    valid = [*owners.common_names(), *(f.name for f in owners.family_fields(family))]
    unknown = []
    for key in data:
        if key not in valid:
            foreign = owners.foreign_option_message(str(key), family, str(path), chosen_by or "--family")
            if foreign:
                raise UserError(foreign)
            unknown.append(str(key))
    if unknown:
        raise UserError(unknown_options_message(unknown, valid, f"in {path}"))
    return {k: coerce(k, v, str(path)) for k, v in data.items()}


def _yaml_family(data: dict, path: Path) -> tuple[str, str]:
    """The family a YAML file names (``family:``), else the schema's default; and what chose it."""
    if isinstance(data.get("family"), str) and data["family"]:
        return data["family"], f"`family:` in {path}"
    return DEFAULT_FAMILY, "the default family"


def _read_yaml(path: str | Path) -> dict[str, Any]:
    """The mapping in a YAML file, unchecked; errors name the file."""
    path = Path(path)
    if not path.is_file():
        raise UserError(f"The config file `{path}` (from --config) does not exist. Check the path.")
    try:
        data = yaml.safe_load(path.read_text()) or {}
    except yaml.YAMLError as err:
        raise UserError(f"The config file `{path}` is not valid YAML ({err}). Fix the syntax at the position shown.")
    if not isinstance(data, dict):
        raise UserError(f"The config file `{path}` must be a mapping of option: value, not {type(data).__name__}.")
    if _is_ai_toolkit(data):
        raise UserError(ai_toolkit_message(path))
    return data


def _is_ai_toolkit(data: dict) -> bool:
    """An ai-toolkit job file: ``job:``/``config:`` at the top, ``config: {process: [...]}`` (no dit-lora option
    is called ``job``, ``config`` is a flag, never a YAML key)."""
    config = data.get("config")
    return ("job" in data or "config" in data) and isinstance(config, dict) and isinstance(config.get("process"), list)


#: ai-toolkit's main keys (their place in its nested file) and dit-lora's flat option, from :mod:`.peers`
_AI_TOOLKIT_KEYS = ("model.name_or_path", "datasets[].folder_path", "datasets[].caption_ext", "network.linear",
                    "network.linear_alpha", "train.lr", "train.steps", "train.batch_size", "train.dtype",
                    "save.save_every", "training_folder")


def ai_toolkit_message(path: Path) -> str:
    """The paragraph for an ai-toolkit job YAML given as a dit-lora ``--config``: the shape, the main keys'
    counterparts (:data:`.peers.PEER_FLAGS`), the migration page."""
    from dit_lora.config.peers import PEER_FLAGS

    pairs = []
    for where in _AI_TOOLKIT_KEYS:
        peer = PEER_FLAGS.get(where.rsplit(".", 1)[-1])
        if peer is not None and peer.option:
            pairs.append(f"{where} -> `{peer.option}`")
    return (f"The config file `{path}` is an ai-toolkit config (top-level `job`/`config` with a `process` list): "
            "dit-lora's YAML is flat, one `option: value` per line at the top level, the same names as its --flags. "
            f"Rewrite it as such; its main keys map as {', '.join(pairs)}. docs/guides/migrating.md lists every "
            "ai-toolkit key and its dit-lora option (or that there is none).")


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
    return repr(f.default_factory())  # type: ignore[misc]


def check_one_source(train_data_dir: str | None, dataset_name: str | None, what: str) -> None:
    """Raise the one paragraph for both or neither of --train_data_dir and --dataset_name (``what``: the folder's
    content)."""
    if bool(train_data_dir) == bool(dataset_name):
        both = "both were given" if train_data_dir else "neither was given"
        raise UserError(
            f"Pass exactly one data source: --train_data_dir (a local folder of {what}) or --dataset_name (a Hugging "
            f"Face dataset id or a folder `datasets` can open); {both}."
        )


def build_argparser(prog: str | None = None, family: str | None = None, *, families_epilog: bool = False,
                    with_family: bool = True) -> argparse.ArgumentParser:
    """An argparse parser with one ``--flag`` per common option and per option of ``family`` (default: the
    schema's), the family's under its own section title (values are coerced later). ``families_epilog``: the help
    ends with the registered families (building each: only for ``--help``); ``with_family=False``: the common
    options only (the help of a run whose family is not known yet)."""
    parser = _Parser(
        prog=prog,
        description="LoRA fine-tuning with dit-lora. Options come from --config YAML, overridden by flags."
        + ("" if with_family else " Listed: the options every family has; a family's own options are listed by "
           f"`{prog or 'dit-lora train'} --family NAME --help`."),
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
    from dit_lora.registry import available, get_family, recipe_script

    lines = ["families (--family; default: the config's `family:`, else the model's):"]
    for name in available():
        lines.append(f"  {name:<18} {get_family(name).pipeline_class_name} ({recipe_script(name)})")
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
    f = _option(name)[0]
    tp, _ = _base_type(_field_type(f.name))
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
    elif typing.get_origin(tp) is list:
        parser.add_argument(f"--{f.name}", nargs="+", default=None, help=help_text, metavar="PATTERN")
    else:
        metavar = getattr(tp, "__name__", "VALUE").upper()
        parser.add_argument(f"--{f.name}", default=None, help=help_text, metavar=metavar)


def parse_config(argv: Sequence[str] | None = None, prog: str | None = None, *, needs_data: bool = True,
                 infer_family: Callable[[TrainConfig], str | tuple[str, str]] | None = None) -> TrainConfig:
    """Parse ``--config`` YAML plus flag overrides into a validated :class:`TrainConfig`.

    The family comes first: ``--family``, else the YAML's ``family:``, else ``infer_family`` (given the common
    options, e.g. the model's family for ``dit-lora plan``; it may return ``(family, what chose it)`` for the
    messages, e.g. a recipe script's own family), else the schema's default. The flags are then the
    common options plus that family's; another family's flag or YAML key is refused naming its owner.
    ``needs_data=False`` (``dit-lora plan``) accepts a configuration without a data source.
    """
    argv = list(sys.argv[1:] if argv is None else argv)
    family, chosen_by, config = _family_of(argv)
    if family is None and infer_family is not None:
        common = _parse_values(argv, DEFAULT_FAMILY, "the default family",
                               config, prog=prog, common_only=True)
        preliminary = TrainConfig(**common, explicit=frozenset(common))
        asks_help = bool(_HELP & set(argv))
        if not asks_help:  # the help comes first, once the family is known
            validate_static(preliminary, needs_data=needs_data)
        try:
            inferred = infer_family(preliminary)
        except UserError:
            if asks_help:  # no family to be had (no model named): the common options and how to see a family's
                _print_common_help(prog)
            raise
        family, chosen_by = inferred if isinstance(inferred, tuple) else (inferred, "the model's family")
    if family is None:
        family, chosen_by = DEFAULT_FAMILY, "the default family"
    values = _parse_values(argv, family, chosen_by, config, prog=prog)
    values["family"] = family
    common, own = owners.split_values(family, values, source=None)
    # What the user set (YAML or flag): the catalogue's defaults fill only the rest.
    explicit = frozenset(values) - ({"family"} if chosen_by == "the default family" else set())
    cfg = TrainConfig(**common, family_options=owners.options_class(family)(**own), explicit=explicit)
    check_applies(cfg, lambda name: _given(name, argv, config), chosen_by)
    validate_static(cfg, needs_data=needs_data)
    return cfg


def _given(name: str, argv: Sequence[str], config: str | None) -> str:
    """How option ``name`` was set: ``--name`` (a flag, which wins) or ``name in the YAML path``."""
    if any(a == f"--{name}" or a.startswith(f"--{name}=") for a in argv) or not config:
        return f"--{name}"
    return f"`{name}` in {config}"


def named_family(argv: Sequence[str]) -> str | None:
    """The family ``--family`` or the ``--config`` YAML's ``family:`` names (None: neither), as :func:`parse_config`
    reads it; for an entry point that checks the name before the whole parse (e.g. a recipe script's)."""
    return _family_of(list(argv))[0]


def _family_of(argv: list[str]) -> tuple[str | None, str, str | None]:
    """(family, what chose it, --config path) from ``--family`` or the YAML's ``family:`` (None: neither)."""
    peek = argparse.ArgumentParser(add_help=False, allow_abbrev=False)
    peek.add_argument("--family", default=None)
    peek.add_argument("--config", default=None)
    accept_negative_numbers(peek)
    try:
        known, _ = peek.parse_known_args(argv)
    except SystemExit:  # e.g. `--family` without a value: the full parser says so
        return None, "--family", None
    if known.family is not None:
        return str(coerce("family", known.family, "--family")), "--family", known.config
    if known.config:
        path = Path(known.config)
        if path.is_file():
            try:
                data = _read_yaml(path)
            except UserError:
                return None, "", known.config  # load_yaml reports the bad file
            if isinstance(data.get("family"), str) and data["family"]:
                return data["family"], f"`family:` in {path}", known.config
    return None, "", known.config


def _parse_values(argv: list[str], family: str, chosen_by: str, config: str | None, *, prog: str | None = None,
                  common_only: bool = False) -> dict[str, Any]:
    """The options set in ``argv`` and its ``--config`` YAML for a run of ``family``, coerced (flags win).

    ``common_only``: only the common options (the family's are left for the second pass, which also answers
    ``--help``: the help lists the family's options).
    """
    parser = build_argparser(prog, family, families_epilog=not common_only and bool(_HELP & set(argv)))
    args, unknown = parser.parse_known_args([a for a in argv if a not in _HELP] if common_only else argv)
    own = [f.name for f in owners.family_fields(family)]
    if common_only and not _HELP & set(argv):  # an option no family has is wrong whatever the family: say so
        _refuse_unknown(unknown, config)      # before any data or model check
    if unknown and not common_only:
        bad = next((u for u in unknown if u.startswith("-")), unknown[0])
        foreign = owners.foreign_option_message(bad.split("=")[0].lstrip("-"), family, "--", chosen_by)
        if foreign and bad.startswith("--"):
            raise UserError(foreign)
        if not bad.startswith("-"):
            raise UserError(f"Unexpected argument `{bad}` on the command line: every value follows its --option. "
                            "Run with --help for every valid option.")
        flags = [u for u in unknown if u.startswith("-") and not NEGATIVE_NUMBER.match(u)]  # all, each hinted
        raise UserError(unknown_options_message(flags, [*owners.common_names(), *own, "config"], "on the command line"))
    values: dict[str, Any] = {}
    if config:
        values = _common_yaml(config) if common_only else load_yaml(config, family, chosen_by)
    for name in [f.name for f in config_fields()] + ([] if common_only else own):
        raw = getattr(args, name)
        if raw is not None:
            values[name] = coerce(name, raw, f"--{name}")
    return values


_HELP = {"-h", "--help"}


def _refuse_unknown(unknown: list[str], config: str | None) -> None:
    """Raise the paragraph for the first flag (in ``unknown``) or ``config`` YAML key that no family has (another
    family's option waits for the family to be known: its message names the owner)."""
    known = set(owners.all_option_names()) | {"config"}
    flags = [arg for arg in unknown if arg.startswith("--") and arg.split("=")[0][2:] not in known]
    if flags:
        raise UserError(unknown_options_message(flags, sorted(known), "on the command line"))
    if config and Path(config).is_file():
        try:
            data = _read_yaml(config)
        except UserError:
            return  # the full parse reports the bad file
        keys = [str(key) for key in data if str(key) not in known]
        if keys:
            raise UserError(unknown_options_message(keys, sorted(known - {"config"}), f"in {config}"))


def _common_yaml(path: str) -> dict[str, Any]:
    """The common options of a YAML file, coerced (another family's keys are checked in the second pass)."""
    data = _read_yaml(path)
    common = owners.common_names()
    return {k: coerce(k, v, str(path)) for k, v in data.items() if k in common}


def validate_static(cfg: TrainConfig, *, needs_data: bool = True) -> None:
    """Checks that need no model or data: ranges and combinations of options, and optional packages."""
    check_ranges(cfg)
    check_combinations(cfg, needs_data=needs_data)
    check_optional_packages(cfg)


def check_ranges(cfg: TrainConfig) -> None:
    """Every numeric option finite and inside its range (``valid`` in the schema), however the config was made:
    the common options, then the family's."""
    for f in config_fields():
        message = range_message(f.name, getattr(cfg, f.name))
        if message is not None:
            raise UserError(message)
    for f in fields(cfg.family_options):
        message = range_message(f.name, getattr(cfg.family_options, f.name))
        if message is not None:
            raise UserError(message)


def check_combinations(cfg: TrainConfig, *, needs_data: bool = True) -> None:
    """Options that exclude or need each other: frame buckets, fp16, the model and data source, the Hub."""
    if cfg.frame_buckets:
        clash = [f"--{n}" for n in ("max_num_frames", "height", "width") if getattr(cfg, n) is not None]
        if clash:
            raise UserError(
                f"--frame_buckets {cfg.frame_buckets} sets every clip's frames and size, so {', '.join(clash)} would "
                f"be ignored. Remove {' and '.join(clash)}, or drop --frame_buckets to train one size."
            )
    if cfg.mixed_precision == "fp16" and not cfg.allow_fp16:
        raise UserError(
            "--mixed_precision fp16 is refused: fp16 overflows (65504 max) inside Sana's linear attention and "
            "Gemma/Mistral activations, the root cause of the NaN losses reported for Sana and VideoChat2. Use "
            "--mixed_precision bf16 (the default; same memory, fp32 range). If your GPU has no bf16 and you "
            "accept the risk, add --allow_fp16 (a GradScaler is then used)."
        )
    if cfg.mixed_precision == "fp16":
        import torch

        if not torch.cuda.is_available():
            raise UserError(
                "--mixed_precision fp16 --allow_fp16 needs a CUDA GPU (fp16 autocast and GradScaler are GPU "
                "features). Use --mixed_precision bf16, which also works on CPU."
            )
    if not cfg.pretrained_model_name_or_path:
        raise UserError(
            "No model given: set --pretrained_model_name_or_path to a Hub id (e.g. "
            "Efficient-Large-Model/Sana_1600M_1024px_BF16_diffusers) or a local diffusers folder."
        )
    if not cfg.demo and needs_data:
        check_one_source(cfg.train_data_dir, cfg.dataset_name, "images or videos with captions")
    if cfg.push_to_hub and not cfg.hub_model_id:
        raise UserError("--push_to_hub needs --hub_model_id (e.g. `me/my-sana-lora`).")
    if cfg.push_later_ok and not cfg.push_to_hub:
        # Accepting it would let a user believe the run pushes later, when nothing is pushed at all.
        raise UserError(
            "--push_later_ok only says what --push_to_hub does when the start-of-run check finds that the push "
            "cannot happen, but --push_to_hub is off, so nothing would be pushed. Add --push_to_hub (with "
            "--hub_model_id) to upload the adapter at the end, or drop --push_later_ok."
        )


def check_optional_packages(cfg: TrainConfig) -> None:
    """Packages that only some options need (wandb, bitsandbytes), imported to prove they work here."""
    if cfg.report_to == "wandb":
        try:
            import wandb  # noqa: F401
        except ImportError:
            raise UserError("--report_to wandb needs the `wandb` package: `pip install wandb`, or use --report_to "
                            "tensorboard.")
    if cfg.use_8bit_adam:
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
