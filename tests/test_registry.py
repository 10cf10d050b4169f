"""The family registry (``dit_lora/registry.py``): one entry per family package, every list derived from it,
and ``register_family`` for a family that lives anywhere else (here: a folder written by the test)."""

from __future__ import annotations

import importlib
import pkgutil
import textwrap
from pathlib import Path

import pytest

import dit_lora.families as family_packages
from dit_lora import registry
from helpers import ROOT
from spec_parts import tiny_spec

FAMILY = textwrap.dedent("""
    from dit_lora.registry import FamilyEntry
    from spec_parts import tiny_spec


    def make(name):
        return tiny_spec(name)


    ENTRY = FamilyEntry(names=("tiny_elsewhere",), factory={factory}, catalogue="{package}",
                        demo_configs=("tiny/demo.yaml",), recipe="tiny_lora.py")
""")
CATALOGUE = '{"provenance": ["a tiny family of the tests: nothing published"], "entries": []}\n'


def _write_family(folder: Path, package: str, factory: str) -> Path:
    """A family package written under ``folder``: a spec of the tiny required components, an entry, a catalogue."""
    (folder / package).mkdir(parents=True)
    (folder / package / "__init__.py").write_text(FAMILY.format(factory=factory, package=package))
    (folder / package / "catalogue.json").write_text(CATALOGUE)
    return folder / package


@pytest.fixture
def elsewhere(tmp_path, monkeypatch):
    """The ENTRY of a family package in a tmp folder (not registered); unregistered after the test if it was."""
    _write_family(tmp_path, "tiny_family_pkg", factory="make")
    monkeypatch.syspath_prepend(str(tmp_path))
    entry = importlib.import_module("tiny_family_pkg").ENTRY
    yield entry
    if entry in registry.entries():
        registry.unregister_family(entry)


def test_a_family_from_another_folder_registers_with_one_call(elsewhere):
    from dit_lora.catalogue import data_files

    registry.register_family(elsewhere)
    assert "tiny_elsewhere" in registry.available()
    assert type(registry.get_family("tiny_elsewhere")).__name__ == "FamilySpec"
    assert registry.entry_for("tiny_elsewhere") is elsewhere and registry.entries()[-1] is elsewhere
    assert registry.recipe_script("tiny_elsewhere") == "recipes/tiny_lora.py"
    assert data_files()[-1] == "tiny_family_pkg"  # its catalogue counts, nothing else to edit
    registry.unregister_family(elsewhere)
    assert "tiny_elsewhere" not in registry.available() and "tiny_family_pkg" not in data_files()


def test_a_name_already_registered_is_refused(elsewhere):
    from dataclasses import replace

    registry.register_family(elsewhere)
    with pytest.raises(ValueError, match="family name `tiny_elsewhere` is already registered"):
        registry.register_family(replace(elsewhere))
    with pytest.raises(ValueError, match="family name `sana` is already registered .*recipes/sana_lora.py"):
        registry.register_family(replace(elsewhere, names=("sana",)))
    assert registry.entries().count(elsewhere) == 1 and registry.entry_for("sana").recipe == "sana_lora.py"


def test_a_lazy_entry_is_built_and_checked_when_first_asked_for(tmp_path, monkeypatch):
    """Registered lazily (as the built-in families are), a factory that imports its spec module in its body is not
    called at registration; its capabilities are checked on the first get_family (registered otherwise, a family is
    built and checked at once: tests/toy_family)."""
    from dit_lora.core.errors import UserError

    folder = _write_family(tmp_path, "tiny_lazy_pkg", factory="lazy_make")
    (folder / "__init__.py").write_text((folder / "__init__.py").read_text().replace(
        "def make(name):", "def lazy_make(name):\n    from tiny_lazy_pkg.spec import make\n\n    return make(name)\n\n\n"
                           "def make(name):"))
    (folder / "spec.py").write_text("from spec_parts import tiny_spec\n\n\nclass Claims:\n"
                                    "    def validation_inputs(self, comps, validation): ...\n\n\n"
                                    "def make(name):\n    return tiny_spec(name, samples=Claims())\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    entry = importlib.import_module("tiny_lazy_pkg").ENTRY
    registry.register_family(entry, lazy=True)
    try:
        assert "tiny_lazy_pkg.spec" not in __import__("sys").modules
        with pytest.raises(UserError, match=r"`samples` component \(Claims\) lacks generate, .* of the Samples protocol"):
            registry.get_family("tiny_elsewhere")
    finally:
        registry.unregister_family(entry)


def _family_packages() -> set[str]:
    """The packages under dit_lora/families/ (which holds families only: the kit is dit_lora.kit)."""
    return {m.name for m in pkgutil.iter_modules(family_packages.__path__) if m.ispkg}


def test_every_family_package_has_its_one_registry_line():
    """BUILT_IN names every family package under dit_lora/families/ (each with an ENTRY), and nothing else."""
    assert sorted(registry.BUILT_IN) == sorted(_family_packages())
    built_in = [importlib.import_module(f"dit_lora.families.{name}").ENTRY for name in registry.BUILT_IN]
    assert registry.entries()[:len(built_in)] == built_in
    assert sorted(n for e in built_in for n in e.names) == registry.available()


def test_a_family_package_without_its_line_is_found(tmp_path, monkeypatch):
    """A package under dit_lora/families/ that is not in BUILT_IN fails the check."""
    (tmp_path / "newfam").mkdir()
    (tmp_path / "newfam" / "__init__.py").write_text("")
    monkeypatch.setattr(family_packages, "__path__", [*family_packages.__path__, str(tmp_path)])
    found = _family_packages()
    assert "newfam" in found
    assert sorted(registry.BUILT_IN) != sorted(found)


def test_a_factory_that_returns_no_spec_is_refused_naming_the_entry_and_the_fix():
    from dit_lora.core.errors import UserError
    from dit_lora.registry import FamilyEntry

    def old_style(name):
        return object()

    with pytest.raises(UserError, match=r"(?s)family `not_a_spec` is refused: the factory of its entry "
                                        r"\(.*old_style, recipe recipes/not_a_spec_lora.py\) returned a object, not a "
                                        r"FamilySpec\. A factory must return `FamilySpec\(name='not_a_spec'"):
        registry.register_family(FamilyEntry(names=("not_a_spec",), factory=old_style))
    assert "not_a_spec" not in registry.available()


def test_recipe_scripts_come_from_the_entries():
    """Every recipes/*_lora.py is the script of one entry, and every entry's script exists."""
    scripts = {e.recipe_script for e in registry.entries()}
    assert scripts == {p.relative_to(ROOT).as_posix() for p in (ROOT / "recipes").glob("*_lora.py")}


def _bare(name: str = "bare_family"):
    """The required components and nothing else: enough to be registered."""
    return tiny_spec(name)


def test_register_family_takes_only_an_entry():
    with pytest.raises(TypeError, match="register_family takes a FamilyEntry, got dict"):
        registry.register_family({"names": ("x",)})


def test_unregistering_an_entry_that_is_not_registered_is_refused():
    from dit_lora.registry import FamilyEntry

    with pytest.raises(ValueError, match="the entry of never_registered is not registered"):
        registry.unregister_family(FamilyEntry(names=("never_registered",), factory=_bare))


def test_an_options_class_that_is_no_family_options_is_refused_at_registration():
    from dit_lora.registry import FamilyEntry

    bad = FamilyEntry(names=("bare_family",), factory=_bare, options=FamilyEntry)
    with pytest.raises(TypeError, match="options of family `bare_family` must be a FamilyOptions dataclass"):
        registry.register_family(bad)
    assert "bare_family" not in registry.available()  # nothing half-registered is left behind
    good = FamilyEntry(names=("bare_family",), factory=_bare)
    registry.register_family(good)
    try:
        assert registry.get_family("bare_family").name == "bare_family"
    finally:
        registry.unregister_family(good)


def test_an_option_another_family_declares_is_refused_at_registration(tmp_path, monkeypatch):
    """`--num_classes` is DiT's (an int); a family declaring its own `num_classes` would get DiT's type and help."""
    from dit_lora.registry import FamilyEntry

    (tmp_path / "clash_options.py").write_text(textwrap.dedent("""
        from dataclasses import dataclass
        from dit_lora.config.schema import FamilyOptions, opt

        @dataclass(frozen=True)
        class ClashOptions(FamilyOptions):
            num_classes: float = opt(0.5, "A fraction, not DiT's class count.")
    """))
    monkeypatch.syspath_prepend(str(tmp_path))
    clash = FamilyEntry(names=("bare_family",), factory=_bare,
                        options=importlib.import_module("clash_options").ClashOptions)
    with pytest.raises(TypeError, match="option `num_classes` of family `bare_family`.*already declared by "
                                        "dit_lora.families.dit.options.DiTOptions"):
        registry.register_family(clash)
    assert "bare_family" not in registry.available()
    from dit_lora.config.owners import all_option_names

    assert "num_classes" in all_option_names()  # the registry is whole again


def test_an_alias_is_read_as_its_family_and_is_no_family_of_its_own():
    """``FamilyEntry.aliases``: another spelling ``--family`` and ``family:`` accept (Z-Image's ``z-image``); it is
    neither listed nor built, and registering a taken alias is refused."""
    from dit_lora.config.families import RegisteredFamilies
    from dit_lora.registry import FamilyEntry, available, canonical_name, register_family

    assert canonical_name("z-image") == "zimage" and canonical_name("sana") == "sana"
    assert "z-image" not in available() and RegisteredFamilies().canonical("z-image") == "zimage"
    with pytest.raises(ValueError, match="`z-image` is already registered"):
        register_family(FamilyEntry(names=("other",), factory=_bare, aliases=("z-image",)))
    with pytest.raises(ValueError, match="repeats one of its names"):
        FamilyEntry(names=("a",), factory=_bare, aliases=("a",))
