"""At most two levels of options-class inheritance inside the package (issue 77): a family's options class is built on
flat groups (``modeling/timestep_options.py``, a family's own) and :class:`FamilyOptions`, and a task's class on its
family's class at most (``WanI2VOptions`` on ``WanOptions``), so a reader finds every option two classes away.

Every options class defined under ``dit_lora.families`` is found by walking the package, not by a list kept here, so a
family added later is held to the limit at once.
"""

from __future__ import annotations

import importlib
import inspect
import pkgutil
from collections.abc import Callable
from dataclasses import dataclass

import dit_lora.families
from dit_lora.config import owners
from dit_lora.config.option import FamilyOptions

#: the longest chain of base classes defined inside dit_lora that an options class may stand on
MAX_DEPTH = 2


def inside_package(cls: type) -> bool:
    """Whether ``cls`` is defined inside dit_lora (``object`` and the standard library's classes do not count)."""
    return cls.__module__.startswith("dit_lora.")


def chain_depth(cls: type, counts: Callable[[type], bool] = inside_package) -> int:
    """The number of classes on the longest chain of ``cls``'s bases that ``counts`` (0: built on none of them)."""
    return max((1 + chain_depth(base, counts) for base in cls.__bases__ if counts(base)), default=0)


def family_options_classes() -> dict[str, type]:
    """Every options class defined in a module under ``dit_lora.families`` (a :class:`FamilyOptions` or a class named
    ``...Options``, the family's own groups included), by its dotted name."""
    found = {}
    for module_info in pkgutil.walk_packages(dit_lora.families.__path__, "dit_lora.families."):
        module = importlib.import_module(module_info.name)
        for name, obj in vars(module).items():
            if inspect.isclass(obj) and obj.__module__ == module.__name__:
                if name.endswith("Options") or issubclass(obj, FamilyOptions):
                    found[f"{module.__name__}.{name}"] = obj
    return found


def test_chain_depth_counts_the_longest_chain_inside():
    @dataclass(frozen=True)
    class Group:
        pass

    @dataclass(frozen=True)
    class Family(Group, FamilyOptions):  # FamilyOptions is dit_lora's: one level
        pass

    @dataclass(frozen=True)
    class Task(Family):
        pass

    @dataclass(frozen=True)
    class Variant(Task, Group):
        pass

    here = lambda cls: cls.__module__ in (__name__, "dit_lora.config.option")  # noqa: E731
    assert [chain_depth(cls, here) for cls in (Group, Family, Task, Variant)] == [0, 1, 2, 3]
    # by default only dit_lora's classes count: these stand on FamilyOptions alone (Family), or on nothing inside
    assert [chain_depth(cls) for cls in (Group, Family, Task, Variant)] == [0, 1, 0, 0]


def test_a_class_built_on_a_tasks_options_class_is_too_deep():
    """What the limit refuses: one more level on a task's class (``WanI2VOptions`` is already two deep)."""
    from dit_lora.families.wan.options import WanI2VOptions

    @dataclass(frozen=True)
    class Deeper(WanI2VOptions):
        pass

    assert chain_depth(WanI2VOptions) == MAX_DEPTH and chain_depth(Deeper) == MAX_DEPTH + 1


def test_every_family_options_class_is_at_most_two_levels_deep():
    found = family_options_classes()
    registered = {owners.options_class(family) for family in owners.known_families()} - {FamilyOptions}
    walked = set(found.values())
    assert registered and registered <= walked, f"not found by the walk: {sorted(map(str, registered - walked))}"
    too_deep = {name: chain_depth(cls) for name, cls in found.items() if chain_depth(cls) > MAX_DEPTH}
    assert not too_deep, (
        f"options classes standing on more than {MAX_DEPTH} levels of dit_lora classes: {too_deep}. Build a family's "
        "options on flat groups (a group is built on nothing) and FamilyOptions, list a group it needs beside it "
        "instead of building on it, and build a task's class on its family's class at most."
    )
