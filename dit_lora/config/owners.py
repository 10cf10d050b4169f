"""Who owns each option: the common :class:`TrainConfig`, or one family's options dataclass.

Each family's own options live in ``dit_lora/families/<package>/options.py``; option groups that several
families share (the flow-matching timestep density) live in a shared module, flat dataclasses that a family's class
lists among its bases beside :class:`FamilyOptions`. The CLI keeps the flat flag names, so a flag's name says nothing
about its owner: this module does.
"""

from __future__ import annotations

import functools
from dataclasses import Field, fields
from typing import Any

from dit_lora.config import families
from dit_lora.config.option import FamilyOptions
from dit_lora.config.sections import SECTIONS, config_fields
from dit_lora.core.errors import UserError

#: options classes declared here directly (a test's family of its own); the registry's entries declare the rest
_REGISTERED: dict[str, type[FamilyOptions]] = {}


def register_options(family: str, options: type[FamilyOptions]) -> None:
    """Declare ``family``'s options class."""
    _REGISTERED[family] = options
    _forget()


def unregister_options(family: str) -> None:
    """Forget ``family``'s options class declared with :func:`register_options`."""
    _REGISTERED.pop(family, None)
    _forget()


def _forget() -> None:
    _resolve.cache_clear()
    _index.cache_clear()


def _declared() -> dict[str, type]:
    """Each family name -> its options class: the registry's entries, in registration order (as :mod:`.families`
    tells them), then those declared here."""
    found: dict[str, type] = dict(families.source().options_classes())
    found.update(_REGISTERED)
    return found


def _on_registry_change(built: tuple[str, ...] | None) -> None:
    """The registry changed: drop what was derived from it; a family built at registration (``built``: its names;
    none for a lazy one) has its options class checked now, so a bad one is refused there (the registry removes it
    again)."""
    _forget()
    if built:
        for name in built:
            options_class(name)
        all_option_names()  # no flag of its options is another family's or a common option


families.on_change(_on_registry_change)


@functools.cache
def _resolve(family: str) -> type[FamilyOptions]:
    cls = _declared().get(family)
    if cls is None:
        return FamilyOptions
    if not (isinstance(cls, type) and issubclass(cls, FamilyOptions)):
        raise TypeError(f"the options of family `{family}` must be a FamilyOptions dataclass, not {cls!r}")
    return cls


def options_class(family: str) -> type[FamilyOptions]:
    """The options dataclass of ``family``; :class:`FamilyOptions` (no options) for a family that declares none."""
    return _resolve(str(family))


def known_families() -> list[str]:
    """Every family whose options class the registry declared, in registration order."""
    return list(_declared())


def family_fields(family: str) -> list[Field]:
    """The option fields of ``family``'s options class, in declaration order (inherited groups first)."""
    return list(fields(options_class(family)))


def common_names() -> frozenset[str]:
    """Names of the common options (every family has them)."""
    return frozenset(f.name for f in config_fields())


@functools.cache
def _index() -> dict[str, tuple[Field, type]]:
    """Every option's name -> (field, the class that declares it): the common ones and every known family's."""
    found: dict[str, tuple[Field, type]] = {}
    for f in config_fields():  # declared by its section's class (TrainConfig's sections)
        found[f.name] = (f, SECTIONS[f.metadata["section"]][0])
    for family in known_families():
        cls = options_class(family)
        for f in fields(cls):
            declared = _declaring_class(cls, f.name)
            other = found.setdefault(f.name, (f, declared))[1]
            if other is not declared:  # one flag, two meanings: its type, range and help would be the first's
                raise TypeError(
                    f"option `{f.name}` of family `{family}` ({declared.__module__}.{declared.__qualname__}) is "
                    f"already declared by {other.__module__}.{other.__qualname__}; a flag has one owner: rename it, "
                    "or inherit the shared group that declares it"
                )
    return found


def _declaring_class(cls: type, name: str) -> type:
    """The class in ``cls``'s bases that declares field ``name`` (for its annotations)."""
    for klass in reversed(cls.__mro__):
        if name in getattr(klass, "__annotations__", {}):
            return klass
    return cls


def find_field(name: str) -> tuple[Field, type] | None:
    """The field called ``name`` (common or any family's) and its declaring class, or None."""
    return _index().get(name)


def all_option_names() -> list[str]:
    """Every option name, common and every known family's."""
    return list(_index())


def owners(name: str) -> list[str]:
    """The families whose options include ``name`` (empty for a common option or an unknown name)."""
    if name in common_names():
        return []
    return [family for family in known_families() if name in {f.name for f in fields(options_class(family))}]


def _families_text(names: list[str]) -> str:
    listed = " and ".join([", ".join(names[:-1]), names[-1]] if len(names) > 2 else names)
    return f"the {listed} {'family' if len(names) == 1 else 'families'}"


#: options of one purpose that families spell differently: where a run's family refuses one, its own is named
COUNTERPARTS: tuple[tuple[str, ...], ...] = (
    ("weighting_scheme", "timestep_sampling"),  # the timestep density
    ("flow_shift", "flux2_shift", "qwen_fixed_shift"),  # a fixed shift of the timestep schedule
)


def counterpart(name: str, family: str) -> str | None:
    """``family``'s own option for what another family's option ``name`` does (:data:`COUNTERPARTS`), or None."""
    for group in COUNTERPARTS:
        if name in group:
            mine = [other for other in group if other != name and family in owners(other)]
            if mine:
                return mine[0]
    return None


def foreign_option_message(name: str, family: str, where: str | None, chosen_by: str) -> str | None:
    """The one paragraph for option ``name`` given to a run of ``family`` that does not have it (None: it does,
    or no family has it). ``where``: ``--name`` (a flag), a YAML path, or None (code); ``chosen_by``: what set
    the family (``--family``, ``family: in run.yaml``, ``the default``)."""
    holders = owners(name)
    if not holders or family in holders:
        return None
    if where is None or where.startswith("--"):
        given, fix = f"--{name}", f"remove --{name}"
    else:
        given, fix = f"`{name}` in {where}", f"remove `{name}` from {where}"
    other, own = holders[0], counterpart(name, family)
    if own is not None:  # the same purpose under this family's name: that is what the user wants, not a new family
        return (
            f"{given} is an option of {_families_text(holders)}; this run trains {family} ({chosen_by}), whose "
            f"option for the same purpose is --{own} (`python -m dit_lora train --family {family} --help` says "
            f"its values). Use --{own} instead, or {fix}."
        )
    return (
        f"{given} is an option of {_families_text(holders)}; this run trains {family} ({chosen_by}). "
        f"To train {other}, use --family {other} (or `family: {other}` in the config); otherwise {fix}."
    )


def split_values(family: str, values: dict[str, Any], source: str | None) -> tuple[dict, dict]:
    """``values`` split into (common options, ``family``'s options); another family's option or an unknown name
    raises one paragraph (``source``: where they came from, as in :func:`foreign_option_message`)."""
    common, own = {}, {}
    mine = {f.name for f in family_fields(family)}
    commons = common_names()
    for name, value in values.items():
        if name in commons:
            common[name] = value
        elif name in mine:
            own[name] = value
        else:
            message = foreign_option_message(name, family, source, "family")
            raise UserError(message or f"`{name}` is not an option of dit-lora (family {family}).")
    return common, own
