"""Registry of model families: one :class:`~.registry.FamilyEntry` per family package, one line each below.

``get_family(name)`` errors with the list of what exists. Everything else that depends on which families exist
(the catalogue's data files, the demo configs the tests run, the recipe scripts, ``--family``'s help) is derived
from :func:`entries`. A family outside this package registers with one call, ``register_family(ENTRY)``.
"""

from __future__ import annotations

import importlib

from dit_lora.core.errors import UserError
from dit_lora.families.base import Components, ModelFamily
from dit_lora.families.registry import FamilyEntry

_ENTRIES: list[FamilyEntry] = []
_BY_NAME: dict[str, FamilyEntry] = {}
_CHECKED: set[str] = set()  # names whose family passed the capability check


def register_family(entry: FamilyEntry) -> None:
    """Make every name of ``entry`` available (``--family``, YAML ``family:``); refuses a name already taken.

    An entry whose factory is a callable is built and checked now (its declared capabilities must have their
    methods); one naming its factory by ``"module:attribute"`` (the built-in families, imported lazily so this
    package stays light) is checked when a name of it is first asked for.
    """
    if not isinstance(entry, FamilyEntry):
        raise TypeError(f"register_family takes a FamilyEntry, got {type(entry).__name__}")
    taken = [name for name in entry.names if name in _BY_NAME]
    if taken:
        owner = _BY_NAME[taken[0]]
        raise ValueError(f"family name `{taken[0]}` is already registered (by the entry of {owner.recipe_script}, "
                         f"factory {_describe(owner.factory)}); choose another name")
    if not isinstance(entry.factory, str):
        for name in entry.names:
            _check(name, entry.build(name))
    _ENTRIES.append(entry)
    _BY_NAME.update(dict.fromkeys(entry.names, entry))
    _declare_options(entry)
    if not isinstance(entry.factory, str):  # built now, so its options class is checked now too
        from dit_lora.config.owners import all_option_names, options_class

        try:
            for name in entry.names:
                options_class(name)
            all_option_names()  # no flag of its options is another family's or a common option
        except Exception:
            unregister_family(entry)
            raise


def _declare_options(entry: FamilyEntry) -> None:
    """Tell the option owners (:mod:`dit_lora.config.owners`) each name's own options class."""
    from dit_lora.config.owners import register_options

    for name in entry.names:
        if entry.options_for(name) is not None:
            register_options(name, entry.options_for(name))


def unregister_family(entry: FamilyEntry) -> None:
    """Remove ``entry``'s names again (a test that registered a family of its own cleans up with this)."""
    if entry not in _ENTRIES:
        raise ValueError(f"the entry of {', '.join(entry.names)} is not registered")
    _ENTRIES.remove(entry)
    for name in entry.names:
        _BY_NAME.pop(name, None)
        _CHECKED.discard(name)
    from dit_lora.config.owners import unregister_options

    for name in entry.names:
        unregister_options(name)


def _describe(factory) -> str:
    return factory if isinstance(factory, str) else f"{factory.__module__}.{getattr(factory, '__qualname__', '?')}"


def _check(name: str, family: ModelFamily) -> ModelFamily:
    """``family`` once its declared capabilities were checked (each name once per process)."""
    if name not in _CHECKED:
        from dit_lora.families.capabilities import check_capabilities

        check_capabilities(family)
        _CHECKED.add(name)
    return family


def entries() -> list[FamilyEntry]:
    """Every registered entry, in registration order (the built-in families first)."""
    return list(_ENTRIES)


def entry_for(name: str) -> FamilyEntry:
    """The entry that registered the family ``name``; unknown names list the valid ones."""
    if name not in _BY_NAME:
        raise UserError(f"Unknown model family `{name}` (--family). Available families: {', '.join(available())}.")
    return _BY_NAME[name]


def available() -> list[str]:
    """Names of every registered family."""
    return sorted(_BY_NAME)


def recipe_script(name: str) -> str:
    """``recipes/<...>_lora.py``, the script that trains the family ``name``."""
    return entry_for(name).recipe_script


def get_family(name: str) -> ModelFamily:
    """Instantiate the family called ``name``; unknown names list the valid ones."""
    return _check(name, entry_for(name).build(name))


def family_for_pipeline(pipe) -> ModelFamily | None:
    """The family whose ``pipeline_class_name`` is ``pipe``'s class (or a base class of it), if any."""
    names = {cls.__name__ for cls in type(pipe).__mro__}
    for name in available():
        family = get_family(name)
        if family.pipeline_class_name in names:
            return family
    return None


def family_for_model(cfg) -> str:
    """The family that trains ``cfg.pretrained_model_name_or_path``: its catalogue entry, else its configs' class.

    Reads small config files only; when neither says, stops with the class the configs name and the pipelines
    each family trains (:func:`.support.unsupported_model`).
    """
    from dit_lora.catalogue import by_hub_id, match
    from dit_lora.catalogue.defaults import config_reader

    entry = by_hub_id(str(cfg.pretrained_model_name_or_path or ""))
    if entry is not None:
        return entry.family
    read = config_reader(cfg)
    for name in available():
        if match(name, read) is not None:
            return name
    index, config = read("", "model_index.json") or {}, read("", "config.json") or {}
    for name in available():
        if get_family(name).pipeline_class_name in (index.get("_class_name"), *(config.get("architectures") or [])):
            return name
    from dit_lora.families.support import unsupported_model

    raise unsupported_model(str(cfg.pretrained_model_name_or_path), read)


#: The built-in family packages, one line each (its ENTRY lists its names, catalogue, demo configs and recipe), in
#: the order the catalogue lists them.
BUILT_IN = (
    "sana",
    "cogvideox",
    "dit",
    "videollm",
    "wan",
)
for _package in BUILT_IN:
    register_family(importlib.import_module(f"{__name__}.{_package}").ENTRY)
del _package

__all__ = ["BUILT_IN", "Components", "FamilyEntry", "ModelFamily", "available", "entries", "entry_for",
           "family_for_model", "family_for_pipeline", "get_family", "recipe_script", "register_family",
           "unregister_family"]
