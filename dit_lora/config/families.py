"""The families the options know of, as the registry tells them: the option layer's one port to the family registry.

The config package declares options; it imports no registry. What it needs to know of the families (the names
``--family`` accepts and their aliases, each family's options class, the pipeline and recipe script its help line
names, the capabilities an ``Applies`` tag is judged against) comes through a :class:`FamilySource`, which
:mod:`dit_lora.registry` (a layer above) installs when it is imported (``dit_lora/__init__.py`` imports it, so every
``import dit_lora...`` has one), and registrations are announced here through :func:`changed`. So the type checker
and the import graph see one way: registry -> config, and the contract may annotate with the config's types.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Protocol


class FamilySource(Protocol):
    """What the options read of the registered families (:mod:`dit_lora.registry` answers it)."""

    def available(self) -> list[str]:
        """Every registered family name, sorted."""
        ...

    def canonical_name(self, name: str) -> str:
        """The family an alias stands for (``z-image`` -> ``zimage``); any other name as it is."""
        ...

    def options_classes(self) -> dict[str, type]:
        """Each family name -> its options class, in registration order; a name that declares none is left out."""
        ...

    def pipelines_of(self, name: str) -> tuple[str, ...]:
        """The pipeline (or model) classes the family ``name`` trains, its folders' class first."""
        ...

    def recipe_script(self, name: str) -> str:
        """The recipe script that trains the family ``name``."""
        ...

    def capabilities(self, name: str) -> frozenset[str]:
        """The names of the capability protocols the family ``name`` declares (``contract/capabilities.py``)."""
        ...


_SOURCE: list[FamilySource] = []
#: callbacks told of each registration (the names built and checked now, else ()) and removal (None)
_WATCHERS: list[Callable[[tuple[str, ...] | None], None]] = []


def install(source: FamilySource) -> None:
    """Make ``source`` the families' source (the registry's call when it is imported; a later one replaces it)."""
    _SOURCE[:] = [source]


def source() -> FamilySource:
    """The installed :class:`FamilySource`."""
    if not _SOURCE:  # dit_lora/__init__.py imports the registry, which installs it: only a broken install gets here
        raise RuntimeError("no family registry is installed: import dit_lora.registry before reading the families")
    return _SOURCE[0]


def on_change(callback: Callable[[tuple[str, ...] | None], None]) -> None:
    """Call ``callback(built)`` after each registration (``built``: the names whose spec was built and checked at
    registration; () for a lazy entry, a built-in family's) and ``callback(None)`` after each removal. A callback
    that raises on a registration refuses it (the registry removes the entry again)."""
    if callback not in _WATCHERS:
        _WATCHERS.append(callback)


def changed(built: tuple[str, ...] | None) -> None:
    """The registry's announcement of a registration (``built``, as :func:`on_change` says) or a removal (None)."""
    for callback in list(_WATCHERS):
        callback(built)


class RegisteredFamilies(Sequence):
    """``--family``'s choices: the names in the family registry (:mod:`dit_lora.families`), read when asked from
    the installed :class:`FamilySource`, so the help, the options reference and the check list every registered
    family, one registered later too."""

    def _names(self) -> list[str]:
        return source().available()

    def canonical(self, value: str) -> str:
        """The family an alias stands for (``z-image`` -> ``zimage``); any other value as it is."""
        return source().canonical_name(value)

    def __getitem__(self, index):
        return self._names()[index]

    def __len__(self) -> int:
        return len(self._names())
