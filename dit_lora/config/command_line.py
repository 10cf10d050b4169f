"""The command line: one ``--flag`` per option, its help, default, choices and range from the schema.

The values stay strings here (:func:`.values.coerce` types them); an argparse error is a :class:`UserError` that
points at ``--help``; a negative number after a flag is its value. The help of a run whose family is not known yet
lists the common options and the registered families (:func:`families_help`).
"""

from __future__ import annotations

import argparse
import re
import typing
from dataclasses import MISSING

from dit_lora.config import families, owners
from dit_lora.config.schema import DEFAULT_FAMILY, config_fields
from dit_lora.config.values import base_type, field_type, option_field
from dit_lora.core.errors import UserError

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


def print_common_help(prog: str | None) -> typing.NoReturn:
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


def every_option_parser(prog: str | None) -> argparse.ArgumentParser:
    """The parser of the common options plus every registered family's (a run whose family is not known yet)."""
    parser = build_argparser(prog, with_family=False)
    group = parser.add_argument_group("family options")
    for name in owners.all_option_names():
        if name not in owners.common_names():
            add_config_flag(group, name)
    return parser


def read_flags(parser: argparse.ArgumentParser, argv: list[str]) -> tuple[dict[str, str], list[str]]:
    """The one argparse pass: the raw value of each option given in ``argv`` and the arguments ``parser`` does not
    know, in order (``--help`` prints the help and exits here)."""
    args, unknown = parser.parse_known_args(argv)
    given = {name: raw for name, raw in vars(args).items() if raw is not None and name != "config"}
    return given, unknown
