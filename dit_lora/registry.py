"""The family registry: one :class:`FamilyEntry` per family, looked up by name.

Each family package (``dit_lora/families/<name>/__init__.py``) defines ``ENTRY``; the built-in ones are listed
below by module path (:data:`BUILT_IN`) and imported with :mod:`importlib` on the first lookup, so this module,
and :mod:`dit_lora.config` above it, import no family. From the entries come the family names (``--family``), the
catalogue's data files, the demo configs the tests run, the recipe script of each name and its docs page. A
family living outside the package (a test folder, a plugin) builds its own ``FamilyEntry`` and registers it with
one call, :func:`register_family`.

This module imports nothing heavy, and neither does a family package's ``__init__.py``: its ``ENTRY`` holds its
options class (``options.py`` imports no torch) and a factory function whose body imports the family's ``spec.py``
(which loads torch) when a name of it is first built. That import, and this module's import of each built-in
package, are the only imports done by name. Other modules learn of registrations through :func:`watch`. The option layer (:mod:`dit_lora.config`, below the
registry and the contract, importing neither) is told: importing this module installs the registry as its
:class:`~dit_lora.config.families.FamilySource` (the names, aliases, options classes, pipelines, recipe scripts and
capabilities it reads) and announces each registration to it (the option owners check a new family's options
class and drop their caches). ``dit_lora/__init__.py`` imports this module, so every process has it installed.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any

from dit_lora.config import families as option_families
from dit_lora.contract.spec import FamilySpec
from dit_lora.core.errors import UserError


@dataclass(frozen=True)
class FamilyEntry:
    """What a family package declares about itself (immutable; one per package, several names allowed)."""

    #: The family names it registers (``--family``, YAML ``family:``), the first being the default its recipe
    #: script trains (CogVideoX: text-to-video, then image-to-video; videollm: one per video-LLM architecture).
    names: tuple[str, ...]
    #: Builds the :class:`~dit_lora.contract.spec.FamilySpec` of one name: called with that name. A built-in
    #: family's is a function of its ``__init__.py`` that imports its ``spec.py`` in its body (so importing the
    #: package, and ``dit-lora train --help``, load no torch).
    factory: Callable[[str], Any]
    #: The family's own options class (``families/<name>/options.py``) for every name, or a mapping of name to
    #: class where names differ (CogVideoX image-to-video); None: only the common options.
    options: type | Mapping[str, type] | None = None
    #: Package whose ``catalogue.json`` lists the family's published checkpoints; None: nothing catalogued.
    catalogue: str | None = None
    #: Its demo configs, relative to ``recipes/configs/`` (e.g. ``"sana/demo.yaml"``): the runs the
    #: no-host-sync audit trains with default flags.
    demo_configs: tuple[str, ...] = ()
    #: File name of its recipe script under ``recipes/`` (default ``<first name>_lora.py``).
    recipe: str = ""
    #: Its page under the documentation (a path from the repository root); None until it has one.
    docs: str | None = None
    #: Other spellings of its default name that ``--family`` and ``family:`` accept (``z-image`` for ``zimage``):
    #: each is read as the default name, never a family of its own (not listed, no spec, no catalogue entries).
    aliases: tuple[str, ...] = ()
    #: True where each name trains another model (the video LLMs: one architecture a name), so a folder of one
    #: name's class is refused for another name; False where the names are tasks of one model (Wan's text- and
    #: image-to-video both train a ``WanPipeline`` folder: the family's own check tells which the folder needs).
    distinct_models: bool = False
    #: The pipeline (or model) classes each name trains, as class names, the one its folders hold first: one tuple
    #: for every name, or a mapping of name to tuple. Read without building a spec (``--help``, family inference),
    #: so no torch; a test checks it equals each spec's ``info.pipeline_classes``. Empty: read from the spec.
    pipelines: tuple[str, ...] | Mapping[str, tuple[str, ...]] = ()

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
        if isinstance(self.pipelines, Mapping):
            object.__setattr__(self, "pipelines", MappingProxyType({k: tuple(v) for k, v in self.pipelines.items()}))
        else:
            object.__setattr__(self, "pipelines", tuple(self.pipelines))
        object.__setattr__(self, "aliases", tuple(self.aliases))
        if set(self.aliases) & set(self.names):
            raise ValueError(f"FamilyEntry.aliases repeats one of its names: {self.aliases!r}")

    @property
    def default(self) -> str:
        """The name its recipe script trains when neither ``--family`` nor the config names one."""
        return self.names[0]

    @property
    def recipe_script(self) -> str:
        """``recipes/<...>_lora.py``, the script that trains every name of this entry."""
        return f"recipes/{self.recipe or self.default + '_lora.py'}"

    def options_for(self, name: str) -> type | None:
        """The class of ``name``'s own options (None: it has only the common options)."""
        if isinstance(self.options, Mapping):
            return self.options.get(name)
        return self.options

    def pipelines_for(self, name: str) -> tuple[str, ...]:
        """The class names ``name`` trains, as declared (:attr:`pipelines`); empty when the entry declares none."""
        if isinstance(self.pipelines, Mapping):
            return tuple(self.pipelines.get(name, ()))
        return tuple(self.pipelines)

    @classmethod
    def in_package(
        cls,
        package: str,
        *,
        factory: Callable[[str], Any],
        options: type | Mapping[str, type],
        **fields: Any,
    ) -> FamilyEntry:
        """The entry of a family package in the standard layout (``families/<family>/``): ``factory`` builds a name's
        spec, ``options`` is its options class (or a mapping of name to class); its names are ``(<family>,)``, its
        ``catalogue.json`` is the catalogue and ``docs/guides/<first name>.md`` its page and
        ``recipes/configs/<first name>/demo.yaml`` its demo and ``recipes/<first name>_lora.py`` its recipe, unless
        ``fields`` says otherwise. ``fields``: the other fields (``names``, ``pipelines``, ``demo_configs``, ...)."""
        fields.setdefault("names", (package.rpartition(".")[2],))
        fields.setdefault("catalogue", package)
        fields.setdefault("demo_configs", (f"{fields['names'][0]}/demo.yaml",))
        fields.setdefault("recipe", f"{fields['names'][0]}_lora.py")
        fields.setdefault("docs", f"docs/guides/{fields['names'][0]}.md")
        return cls(factory=factory, options=options, **fields)

    def build(self, name: str):
        """A new :class:`~dit_lora.contract.spec.FamilySpec` for ``name`` (one of :attr:`names`)."""
        if name not in self.names:
            raise KeyError(f"{name!r} is not a name of this entry ({', '.join(self.names)})")
        return self.factory(name)


#: The package of the built-in families, and their packages under it, one line each (its ENTRY lists its names,
#: catalogue, demo configs and recipe), in the order the catalogue lists them. Imported on the first lookup.
BUILT_IN_PACKAGE = "dit_lora.families"
BUILT_IN = (
    "sana",
    "cogvideox",
    "dit",
    "videollm",
    "wan",
    "qwenimage",
    "zimage",
    "flux2",
    "sanavideo",
    "flux",
    "chroma",
    "lumina2",
    "krea2",
    "ideogram4",
    "ltx2",
    "hunyuanvideo15",
)

_ENTRIES: list[FamilyEntry] = []
_BY_NAME: dict[str, FamilyEntry] = {}
_SPEC_CACHE: dict[str, FamilySpec] = {}  # each name's spec, built once
_ALIASES: dict[str, str] = {}  # another spelling -> the family name it stands for
#: the entries registered lazily (the built-in ones): each name's spec is built and checked when first asked for
_LAZY: list[FamilyEntry] = []
#: callbacks told of each registration (the entry) and removal (None); see :func:`watch`
_WATCHERS: list[Callable[[FamilyEntry | None], None]] = []
_built_in_loaded = False


def _load_built_in() -> None:
    """Register the built-in families (once, before anything else is registered or looked up)."""
    global _built_in_loaded
    if _built_in_loaded:
        return
    _built_in_loaded = True  # set first: registering them calls back here
    try:
        for package in BUILT_IN:
            _register(importlib.import_module(f"{BUILT_IN_PACKAGE}.{package}").ENTRY, lazy=True)
    except BaseException:
        _built_in_loaded = False
        for entry in list(_ENTRIES):
            _remove(entry)
        raise


def watch(callback: Callable[[FamilyEntry | None], None]) -> None:
    """Call ``callback(entry)`` after each registration and ``callback(None)`` after each removal.

    A callback that raises on a registration refuses it (the entry is removed again and the error raised): the
    option owners (:mod:`dit_lora.config.owners`) check a new family's options class this way.
    """
    if callback not in _WATCHERS:
        _WATCHERS.append(callback)


def register_family(entry: FamilyEntry, *, lazy: bool = False) -> None:
    """Make every name of ``entry`` available (``--family``, YAML ``family:``); refuses a name already taken.

    Each name's spec is built and checked now (the factory must build a :class:`FamilySpec`, whose components are
    checked when it is made), and so is its options class; ``lazy``: both when a name of it is first asked for, as
    for the built-in families (whose factories import their ``spec.py``, and so torch, only then).
    """
    _load_built_in()
    _register(entry, lazy=lazy)


def _register(entry: FamilyEntry, *, lazy: bool) -> None:
    if not isinstance(entry, FamilyEntry):
        raise TypeError(f"register_family takes a FamilyEntry, got {type(entry).__name__}")
    taken = [name for name in (*entry.names, *entry.aliases) if name in _BY_NAME or name in _ALIASES]
    if taken:
        owner = _BY_NAME.get(taken[0]) or _BY_NAME[_ALIASES[taken[0]]]
        raise ValueError(
            f"family name `{taken[0]}` is already registered (by the entry of {owner.recipe_script}, "
            f"factory {_describe(owner.factory)}); choose another name"
        )
    if not lazy:
        for name in entry.names:
            _check(name, entry.build(name), entry)
    else:
        _LAZY.append(entry)
    _ENTRIES.append(entry)
    _BY_NAME.update(dict.fromkeys(entry.names, entry))
    _ALIASES.update(dict.fromkeys(entry.aliases, entry.default))
    try:
        for callback in list(_WATCHERS):
            callback(entry)
    except Exception:
        _remove(entry)
        raise


def unregister_family(entry: FamilyEntry) -> None:
    """Remove ``entry``'s names again (a test that registered a family of its own cleans up with this)."""
    _load_built_in()
    if entry not in _ENTRIES:
        raise ValueError(f"the entry of {', '.join(entry.names)} is not registered")
    _remove(entry)


def _remove(entry: FamilyEntry) -> None:
    _ENTRIES.remove(entry)
    _LAZY[:] = [e for e in _LAZY if e is not entry]
    for name in entry.names:
        _BY_NAME.pop(name, None)
        _SPEC_CACHE.pop(name, None)
    for alias in entry.aliases:
        _ALIASES.pop(alias, None)
    for callback in list(_WATCHERS):
        callback(None)


def _describe(factory) -> str:
    return f"{factory.__module__}.{getattr(factory, '__qualname__', '?')}"


def _check(name: str, family: Any, entry: FamilyEntry) -> FamilySpec:
    """``family`` when it is a :class:`FamilySpec` (which checked every component when it was made); anything else
    is refused in one paragraph naming the entry and the fix."""
    if not isinstance(family, FamilySpec):
        raise UserError(
            f"The family `{name}` is refused: the factory of its entry ({_describe(entry.factory)}, "
            f"recipe {entry.recipe_script}) returned a {type(family).__name__}, not a FamilySpec. A factory must "
            f"return `FamilySpec(name={name!r}, info=FamilyInfo(...), model=..., data=..., loss=..., adapter=...)` "
            '(dit_lora.contract.spec), its components filled from small objects; see ARCHITECTURE.md, "What a new '
            'family adds".'
        )
    return family


def entries() -> list[FamilyEntry]:
    """Every registered entry, in registration order (the built-in families first)."""
    _load_built_in()
    return list(_ENTRIES)


def entry_for(name: str) -> FamilyEntry:
    """The entry that registered the family ``name``; unknown names list the valid ones."""
    _load_built_in()
    if name not in _BY_NAME:
        raise UserError(f"Unknown model family `{name}` (--family). Available families: {', '.join(available())}.")
    return _BY_NAME[name]


def available() -> list[str]:
    """Names of every registered family."""
    _load_built_in()
    return sorted(_BY_NAME)


def canonical_name(name: str) -> str:
    """The family name ``name`` stands for: an alias's family (``z-image`` -> ``zimage``), else ``name`` itself."""
    _load_built_in()
    return _ALIASES.get(name, name)


def pipelines_of(name: str) -> tuple[str, ...]:
    """The pipeline (or model) classes the family ``name`` trains, its folders' class first: the entry's declared
    :attr:`FamilyEntry.pipelines` (no spec built, no torch), else its spec's ``info.pipeline_classes``."""
    declared = entry_for(name).pipelines_for(name)
    return declared or get_spec(name).info.pipeline_classes


def recipe_script(name: str) -> str:
    """``recipes/<...>_lora.py``, the script that trains the family ``name``."""
    return entry_for(name).recipe_script


def get_family(name: str) -> FamilySpec:
    """A new :class:`FamilySpec` from the factory of the family called ``name`` (checked); unknown names list the
    valid ones. Callers want :func:`get_spec`, built once per process."""
    entry = entry_for(name)
    return _check(name, entry.build(name), entry)


def get_spec(name: str) -> FamilySpec:
    """The :class:`FamilySpec` of the family called ``name`` (built once per process); unknown names list the valid
    ones."""
    entry = entry_for(name)
    if name not in _SPEC_CACHE:
        _SPEC_CACHE[name] = _check(name, entry.build(name), entry)
    return _SPEC_CACHE[name]


class _OptionSource:
    """The registry as the option layer reads it (:class:`dit_lora.config.families.FamilySource`); each member calls
    this module's function of the moment (a test may replace one)."""

    def available(self) -> list[str]:
        return available()

    def canonical_name(self, name: str) -> str:
        return canonical_name(name)

    def options_classes(self) -> dict[str, type]:
        found: dict[str, type] = {}
        for entry in entries():
            for name in entry.names:
                options = entry.options_for(name)
                if options is not None:
                    found[name] = options
        return found

    def pipelines_of(self, name: str) -> tuple[str, ...]:
        return pipelines_of(name)

    def recipe_script(self, name: str) -> str:
        return recipe_script(name)

    def capabilities(self, name: str) -> frozenset[str]:
        return frozenset(proto.__name__ for proto in get_spec(name).capabilities)


def _tell_options(entry: FamilyEntry | None) -> None:
    """A registration (``entry``) or removal (None) announced to the option layer, with the names built now (their
    options classes are checked at once; a lazy entry's, none)."""
    if entry is None:
        option_families.changed(None)
    else:
        option_families.changed(() if any(e is entry for e in _LAZY) else entry.names)


option_families.install(_OptionSource())
watch(_tell_options)

__all__ = [
    "BUILT_IN",
    "BUILT_IN_PACKAGE",
    "FamilyEntry",
    "available",
    "canonical_name",
    "entries",
    "entry_for",
    "get_family",
    "get_spec",
    "recipe_script",
    "register_family",
    "unregister_family",
    "watch",
]
