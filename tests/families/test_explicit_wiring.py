"""Every family's ``spec.py`` names the classes its spec is built from (issue 77): no part is found by the suffix of
its name, so an editor's go-to-definition and the import graph lead from ``spec.py`` to each component's class (or
to the object the family built once, e.g. its ``DEMO`` or ``BUCKETS``, or the one holding it: ``PARTS`` and the
precision it loads with)."""

from __future__ import annotations

import ast
import importlib
import inspect
from types import ModuleType, SimpleNamespace

import pytest

from dit_lora import registry
from dit_lora.contract.spec import COMPONENTS

FAMILIES = "dit_lora.families."


def named_in(module: ModuleType) -> set[str]:
    """The names ``module`` imports (``from x import Name``) or defines at its top level."""
    names: set[str] = set()
    for node in ast.parse(inspect.getsource(module)).body:
        if isinstance(node, ast.ImportFrom):
            names |= {alias.asname or alias.name for alias in node.names}
        elif isinstance(node, (ast.FunctionDef, ast.ClassDef)):
            names.add(node.name)
        elif isinstance(node, (ast.Assign, ast.AnnAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            names |= {t.id for t in targets if isinstance(t, ast.Name)}
    return names


def reached(value, module: ModuleType, names: set[str]) -> bool:
    """Whether ``value`` is an object ``module`` names, or one of such an object's attributes."""
    for name in names:
        obj = getattr(module, name, None)
        if obj is value or any(v is value for v in getattr(obj, "__dict__", {}).values()):
            return True
    return False


def unnamed(package: str, spec, module: ModuleType) -> list[str]:
    """Each component of ``spec`` whose class is the family's own (defined in ``package``) and that ``module`` names
    neither by its class nor as an object it imports (or that object's attribute), as ``field: Class``."""
    names = named_in(module)
    missing = []
    for field in COMPONENTS:
        value = getattr(spec, field)
        cls = type(value)
        if value is None or not cls.__module__.startswith(FAMILIES + package + "."):
            continue  # a default of the kit's, or a shared class
        if cls.__name__ in names or reached(value, module, names):
            continue
        missing.append(f"{field}: {cls.__name__}")
    return missing


def spec_names() -> dict[str, list[str]]:
    """Built-in family package -> its registered names."""
    found: dict[str, list[str]] = {}
    for entry in registry.entries():
        package = entry.factory.__module__
        if package.startswith(FAMILIES):
            found[package.removeprefix(FAMILIES)] = list(entry.names)
    return found


FOUND = spec_names()


def test_every_built_in_family_is_scanned():
    assert sorted(FOUND) == sorted(registry.BUILT_IN)


@pytest.mark.parametrize("package", sorted(FOUND))
def test_the_spec_module_names_every_component_of_the_family(package):
    module = importlib.import_module(f"{FAMILIES}{package}.spec")
    missing = [f"{name}: {line}" for name in FOUND[package] for line in unnamed(package, registry.get_spec(name), module)]
    assert not missing, f"families/{package}/spec.py does not import the class of " + "; ".join(missing)


def test_unnamed_names_a_component_the_spec_module_does_not_import():
    """The check itself: a family class the module neither imports nor defines is named with its field."""

    class Stray:
        pass

    Stray.__module__ = f"{FAMILIES}chroma.samples"
    module = importlib.import_module(f"{FAMILIES}chroma.spec")
    spec = SimpleNamespace(**{**dict.fromkeys(COMPONENTS), "samples": Stray()})
    assert unnamed("chroma", spec, module) == ["samples: Stray"]
