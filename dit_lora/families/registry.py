"""One :class:`FamilyEntry` per family package: everything the rest of the project derives about a family.

Each ``dit_lora/families/<name>/__init__.py`` defines ``ENTRY``; ``dit_lora/families/__init__.py`` registers it
with one line. From the entries come the family names (``--family``), the catalogue's data files, the demo
configs the tests run, the recipe script of each name and its docs page. A family living outside the package
(a test folder, a plugin) builds its own ``FamilyEntry`` and passes it to
:func:`dit_lora.families.register_family`.

This module imports nothing heavy: an entry names its code by ``"module:attribute"`` strings, imported on use.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any, Callable, Mapping, Union

#: what builds the family called ``name``: a ``"module:attribute"`` path to such a callable (imported when the
#: family is first asked for), or the callable itself
Factory = Union[str, Callable[[str], Any]]


@dataclass(frozen=True)
class FamilyEntry:
    """What a family package declares about itself (immutable; one per package, several names allowed)."""

    #: The family names it registers (``--family``, YAML ``family:``), the first being the default its recipe
    #: script trains (CogVideoX: text-to-video, then image-to-video; videollm: one per video-LLM architecture).
    names: tuple[str, ...]
    #: Builds the :class:`~dit_lora.families.base.ModelFamily` of one name: called with that name. A
    #: ``"module:attribute"`` string is imported on first use (so ``import dit_lora.families`` stays light).
    factory: Factory
    #: The family's own options (``families/<name>/options.py``): a ``"module:Class"`` path for every name, or a
    #: mapping of name to path where names differ (CogVideoX image-to-video); None: only the common options.
    options: Union[str, Mapping[str, str], None] = None
    #: Module holding the family's catalogue ``ENTRIES`` (published checkpoints); None: nothing catalogued.
    catalogue: str | None = None
    #: Its demo configs, relative to ``recipes/configs/`` (e.g. ``"sana/demo.yaml"``): the runs the
    #: no-host-sync audit trains with default flags.
    demo_configs: tuple[str, ...] = ()
    #: File name of its recipe script under ``recipes/`` (default ``<first name>_lora.py``).
    recipe: str = ""
    #: Its page under the documentation (a path from the repository root); None until it has one.
    docs: str | None = None

    def __post_init__(self) -> None:
        if isinstance(self.names, str) or not self.names or not all(isinstance(n, str) and n for n in self.names):
            raise ValueError(f"FamilyEntry.names must be a non-empty tuple of names, got {self.names!r}")
        if len(set(self.names)) != len(self.names):
            raise ValueError(f"FamilyEntry.names repeats a name: {self.names!r}")
        object.__setattr__(self, "names", tuple(self.names))
        if isinstance(self.options, Mapping):
            unknown = sorted(set(self.options) - set(self.names))
            if unknown:
                raise ValueError(f"FamilyEntry.options names {unknown}, which are not among its names {self.names}")
            object.__setattr__(self, "options", MappingProxyType(dict(self.options)))
        object.__setattr__(self, "demo_configs", tuple(self.demo_configs))

    @property
    def default(self) -> str:
        """The name its recipe script trains when neither ``--family`` nor the config names one."""
        return self.names[0]

    @property
    def recipe_script(self) -> str:
        """``recipes/<...>_lora.py``, the script that trains every name of this entry."""
        return f"recipes/{self.recipe or self.default + '_lora.py'}"

    def options_for(self, name: str) -> str | None:
        """The ``"module:Class"`` of ``name``'s own options (None: it has only the common options)."""
        if isinstance(self.options, Mapping):
            return self.options.get(name)
        return self.options

    def build(self, name: str):
        """A new :class:`~dit_lora.families.base.ModelFamily` for ``name`` (one of :attr:`names`)."""
        if name not in self.names:
            raise KeyError(f"{name!r} is not a name of this entry ({', '.join(self.names)})")
        return resolve(self.factory)(name)


def resolve(path: Factory) -> Any:
    """The object a ``"module:attribute"`` path names (a non-string is returned as it is)."""
    if not isinstance(path, str):
        return path
    module, _, attribute = path.partition(":")
    if not module or not attribute:
        raise ValueError(f"expected 'module:attribute', got {path!r}")
    found: Any = importlib.import_module(module)
    for part in attribute.split("."):
        found = getattr(found, part)
    return found


__all__ = ["FamilyEntry", "Factory", "resolve"]
