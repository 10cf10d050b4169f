"""How the suite's tests are spread over pytest-xdist workers: the ``xdist_group`` of a test, and the groups that let
a module's tests build its module-scoped fixtures once (used by conftest.py; a plain module so tests can check it)."""

from __future__ import annotations

import pytest


def share_module_fixtures(items) -> None:
    """Put a module's tests that use one of its module-scoped fixtures (a reference run, tiny models) in one
    ``xdist_group``: a worker builds the fixture once for all of them, instead of each worker building its own when
    pytest-xdist hands their tests out one by one. Tests already in a group keep it (theirs shares a reference)."""
    for item in items:
        if xdist_group(item) is not None or not hasattr(item, "_fixtureinfo"):
            continue
        defs = item._fixtureinfo.name2fixturedefs
        if any(defs.get(name) and defs[name][-1].scope == "module" for name in item.fixturenames):
            item.add_marker(pytest.mark.xdist_group(f"module-fixtures:{item.module.__name__}"))


def xdist_group(item) -> str | None:
    """The name of the item's ``xdist_group`` mark, if it has one."""
    mark = item.get_closest_marker("xdist_group")
    if mark is None:
        return None
    return mark.args[0] if mark.args else mark.kwargs.get("name")


def keep_groups_together(items) -> None:
    """Move each ``xdist_group``'s tests next to its first one, in place (the others keep their order). Under
    pytest-xdist a group runs on one worker one test after another anyway; this does the same without xdist, so what
    the group shares (a reference run, a session-cached real layout that the cache drops once another is asked for)
    is made once there too."""
    first: dict[str, int] = {}
    order = {}
    for i, item in enumerate(items):
        group = xdist_group(item)
        order[id(item)] = i if group is None else first.setdefault(group, i)
    items.sort(key=lambda item: order[id(item)])
