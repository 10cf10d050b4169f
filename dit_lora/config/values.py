"""Option values: each option's declared type, a value coerced to it, its range, and the paragraphs for a value
that is wrong or an option that does not exist.

Shared by the parser (flags and YAML keys), ``dit-lora check-data`` and the checks of a config built in code.
"""

from __future__ import annotations

import difflib
import functools
import math
import types
import typing
from collections.abc import Sequence
from typing import Any

from dit_lora.config import owners
from dit_lora.config.lycoris_args import translate_network_args
from dit_lora.config.peers import peer_hint
from dit_lora.core.errors import UserError


@functools.cache  # resolving the annotations is most of a parse's time; they never change
def _hints(cls: type) -> dict[str, Any]:
    return typing.get_type_hints(cls)


def field_types() -> dict[str, Any]:
    """Every option's declared type: the common ones and every known family's."""
    return {name: field_type(name) for name in owners.all_option_names()}


def field_type(name: str) -> Any:
    """The declared type of option ``name`` (common or a family's), its annotations resolved."""
    f, cls = option_field(name)
    return _hints(cls)[f.name]


def option_field(name: str):
    """(field, declaring class) of option ``name``, common or a family's."""
    found = owners.find_field(name)
    if found is None:
        raise KeyError(name)
    return found


def base_type(tp: Any) -> tuple[Any, bool]:
    """Return (inner type, optional?) for ``X | None`` annotations."""
    origin = typing.get_origin(tp)
    if origin in (typing.Union, types.UnionType):
        args = [a for a in typing.get_args(tp) if a is not type(None)]
        return args[0], True
    return tp, False


def _suggest(name: str, valid: Sequence[str]) -> str:
    # compared in lower case: `LoKr` is `lokr` written as its paper does, not a near miss of `lora`
    lowered = {v.lower(): v for v in valid}
    close = difflib.get_close_matches(str(name).lower(), list(lowered), n=1, cutoff=0.5)
    return f" Did you mean `{lowered[close[0]]}`?" if close else ""


def unknown_message(name: str, valid: Sequence[str], where: str) -> str:
    """The one paragraph for an unknown option ``name`` (no family has it): another trainer's name gets its
    dit-lora counterpart or "no equivalent" (:mod:`.peers`), anything else the closest of ``valid`` (the run's
    option names). ``where``: ``on the command line`` or ``in run.yaml``."""
    bare = name.split("=")[0].lstrip("-")
    flag = where == "on the command line"
    hint = _unknown_hint(bare, valid, flag)
    return (
        f"Unknown option `{'--' if flag else ''}{bare}` {where}.{f' {hint}' if hint else ''} Run with --help "
        "for every valid option."
    )


def _unknown_hint(bare: str, valid: Sequence[str], flag: bool) -> str:
    """Another trainer's counterpart of option ``bare`` (:mod:`.peers`), else the closest of ``valid``, else ""."""
    hint = peer_hint(bare, valid)
    if hint is None:
        close = difflib.get_close_matches(bare, list(valid), n=1, cutoff=0.5)
        hint = f"Did you mean `{'--' if flag else ''}{close[0]}`?" if close else ""
    return hint


def unknown_options_message(
    names: Sequence[str], valid: Sequence[str], where: str, network_args: Sequence[str] | str | None = None
) -> str:
    """One paragraph for every unknown option in ``names`` at once (a config from another trainer has several:
    one per run would take as many runs to fix), each with its hint; one name is :func:`unknown_message`.
    ``network_args``: kohya's ``--network_args`` words given with them, translated into dit-lora's flags."""
    words = [network_args] if isinstance(network_args, str) else list(network_args or [])
    said = translate_network_args(words)
    return _unknown_paragraph(names, valid, where) + (f" {said}" if said else "")


def _unknown_paragraph(names: Sequence[str], valid: Sequence[str], where: str) -> str:
    if len(names) == 1:
        return unknown_message(names[0], valid, where)
    flag = where == "on the command line"
    items = []
    for name in names:
        bare = name.split("=")[0].lstrip("-")
        hint = _unknown_hint(bare, valid, flag)
        items.append(f"`{'--' if flag else ''}{bare}`{f' ({hint.rstrip(chr(46))})' if hint else ''}")
    return (
        f"{len(items)} unknown options {where}: {'; '.join(items)}. Fix or remove each of them; run with --help "
        "for every valid option."
    )


_TRUE = {"1", "true", "yes", "on", "y"}
_FALSE = {"0", "false", "no", "off", "n"}


def coerce(name: str, value: Any, source: str) -> Any:
    """Convert ``value`` to the declared type of field ``name``; errors name the field and source."""
    tp, optional = base_type(field_type(name))
    meta = option_field(name)[0].metadata
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
        if tp is str and meta.get("joined_by") and isinstance(value, (list, tuple)):
            if len(value) == 1:
                return coerce(name, value[0], source)
            if not all(isinstance(v, (str, int, float)) and not isinstance(v, bool) for v in value):
                raise ValueError
            return [str(v) for v in value]  # several: joined by the option's section (its __post_init__)
        if tp is str:
            choices = meta.get("choices")
            # a choices object may read another spelling as its choice (--family's aliases: z-image -> zimage)
            value = getattr(choices, "canonical", str)(str(value))
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
    f = option_field(name)[0]
    rule = f.metadata.get("valid")
    if rule is None or isinstance(value, bool) or not isinstance(value, (int, float)) or value in rule:
        return None
    kind = "an integer" if base_type(field_type(name))[0] is int else "a number"
    wanted = f"{kind} {rule}" if str(rule) != "finite" else f"a finite {kind.split()[-1]}"
    problem = "" if math.isfinite(value) else ", not a finite number"
    why = f": {rule.why}" if rule.why else ""
    if isinstance(f.default, (int, float)) and not isinstance(f.default, bool) and f.default in rule:
        fix = f"or leave it out for the default ({f.default})"
    else:
        fix = "or leave it out (unset)"
    return (
        f"--{name} is {shown or value}{problem}; it must be {wanted}{why}. Set it{_where(source)} to {wanted}, {fix}."
    )


def check_value(name: str, value: Any, source: str | None, raw: Any = None) -> None:
    """Raise the paragraph of :func:`range_message` when ``value`` is outside the range of option ``name``."""
    shown = raw.strip() if isinstance(raw, str) and raw.strip() else None
    message = range_message(name, value, source, shown)
    if message is not None:
        raise UserError(message)
