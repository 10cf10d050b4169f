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


def name_groups_in_node_ids(items) -> None:
    """On a pytest-xdist worker under ``--dist loadgroup``: give each grouped test the node id ``<id>@<group>`` that
    the controller's scheduler reads its group from. pytest-xdist 3.8 writes it to ``item._nodeid``, which pytest 9.2
    no longer reads (``nodeid`` comes from the structured ``item._id``): the write is lost and every group falls apart,
    each test handed out alone (pytest-dev/pytest-xdist#1386). Written here where this pytest reads it; a pytest or
    xdist that already named the group is left alone."""
    try:
        from _pytest.nodeid import NodeId
    except ImportError:  # a pytest before structured node ids: pytest-xdist's own write works there
        return
    for item in items:
        names = sorted({str(mark.args[0] if mark.args else mark.kwargs.get("name", "default"))
                        for mark in item.iter_markers("xdist_group")})
        suffix = "@" + "_".join(names)
        if names and hasattr(item, "_id") and not item.nodeid.endswith(suffix):
            item._id = NodeId.parse(item.nodeid + suffix)
