"""At most two levels of inheritance inside the package for every class defined under ``dit_lora/families`` (issue
77): the longest chain of its base classes that are ``dit_lora``'s is at most two (``WanI2VModel -> WanModel ->
DiffusionModel`` is fine, ``KontextModel -> FluxModel -> GuidedFlowModel -> KitModel -> DiffusionModel`` is not), so
a reader follows a family's class to the kit in at most two steps. The kit keeps its shared behaviour in roots and
in mixins that are roots themselves (``class FluxLoss(GuidedFlowLoss, DiffusionLoss)``)."""

from __future__ import annotations

import functools
import importlib
import inspect
import pkgutil

import pytest

import dit_lora.families as families

LIMIT = 2


@functools.cache
def chain(cls: type) -> tuple[str, ...]:
    """The longest chain of ``dit_lora`` classes from ``cls`` up through its bases (``cls`` first)."""
    bases = [base for base in cls.__bases__ if base.__module__.startswith("dit_lora.")]
    longest = max((chain(base) for base in bases), key=len, default=())
    return (cls.__name__, *longest)


def family_classes() -> list[type]:
    """Every class defined in a module under ``dit_lora/families`` (found by pkgutil, so a new module counts)."""
    found = []
    for info in pkgutil.walk_packages(families.__path__, f"{families.__name__}."):
        module = importlib.import_module(info.name)
        found += [obj for obj in vars(module).values() if inspect.isclass(obj) and obj.__module__ == info.name]
    return found


def too_deep(classes: list[type]) -> list[str]:
    """Each class whose chain is longer than :data:`LIMIT`, as ``module.Class: A -> B -> C -> D``."""
    return sorted(f"{cls.__module__}.{cls.__qualname__}: {' -> '.join(chain(cls))}"
                  for cls in classes if len(chain(cls)) - 1 > LIMIT)


def is_options(cls: type) -> bool:
    """A family's options dataclass (``options.py``'s ``*Options``), flattened on its own (the option groups)."""
    return cls.__module__.endswith(".options") and cls.__name__.endswith("Options")


CLASSES = family_classes()


def test_the_scan_finds_the_family_classes():
    names = {cls.__name__ for cls in CLASSES}
    assert {"ChromaLoss", "KontextModel", "WanI2VSamples", "LTX2ICSetup", "Qwen3VLSpec", "WanOptions"} <= names
    assert len(CLASSES) > 200


@pytest.mark.parametrize("options", [False, True], ids=["components", "options"])
def test_no_family_class_is_more_than_two_levels_below_the_package(options):
    deep = too_deep([cls for cls in CLASSES if is_options(cls) == options])
    assert not deep, (
        f"{len(deep)} class(es) under dit_lora/families have more than {LIMIT} levels of dit_lora base classes; "
        "subclass the kit's base directly and reuse the family's functions, or make a kit base a mixin "
        "(tests/families/test_class_depth.py):\n" + "\n".join(deep)
    )


def test_too_deep_names_the_class_and_its_chain():
    """The check itself: a four-level chain is named with each step; a class two levels down is not."""

    class Root:
        pass

    class Kit(Root):
        pass

    class Family(Kit):
        pass

    class Variant(Family):
        pass

    for cls in (Root, Kit, Family, Variant):
        cls.__module__ = "dit_lora.families.toy"
    assert too_deep([Family, Variant]) == [f"dit_lora.families.toy.{Variant.__qualname__}: Variant -> Family -> Kit -> Root"]
