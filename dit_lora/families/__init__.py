"""Registry of model families. ``get_family(name)`` errors with the list of what exists."""

from __future__ import annotations

from typing import Callable

from ..errors import UserError
from .base import Components, ModelFamily

_REGISTRY: dict[str, Callable[[], ModelFamily]] = {}


def register_family(name: str, factory: Callable[[], ModelFamily]) -> None:
    """Make a family available under ``name`` (factories are called lazily)."""
    _REGISTRY[name] = factory


def available() -> list[str]:
    """Names of every registered family."""
    return sorted(_REGISTRY)


def get_family(name: str) -> ModelFamily:
    """Instantiate the family called ``name``; unknown names list the valid ones."""
    if name not in _REGISTRY:
        raise UserError(f"Unknown model family `{name}` (--family). Available families: {', '.join(available())}.")
    return _REGISTRY[name]()


def _sana() -> ModelFamily:
    from .sana import SanaFamily

    return SanaFamily()


register_family("sana", _sana)

__all__ = ["Components", "ModelFamily", "available", "get_family", "register_family"]
