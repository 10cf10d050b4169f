"""What the suite shares to stay within its time on 2 cores: real layouts built once a session
(tests/support/real_layout.LayoutCache) and module fixtures built once per module (tests/support/scheduling.py)."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import pytest
from real_layout import LayoutCache
from scheduling import (
    keep_groups_together,
    name_groups_in_node_ids,
    share_module_fixtures,
    xdist_group,
)


def _fake_build(root: Path, name: str, *, size: int = 1) -> Path:
    folder = root / name
    folder.mkdir()
    (folder / "weights.bin").write_bytes(b"0" * size)
    return folder


def test_a_layout_is_built_once_per_arguments_and_the_older_one_dropped(tmp_path):
    cache = LayoutCache(tmp_path)
    first = cache(_fake_build, "a", size=2)
    assert cache(_fake_build, "a", size=2) == first and cache.builds == 1
    other = cache(_fake_build, "a", size=3)  # other arguments: another folder
    assert other != first and cache.builds == 2
    assert not first.exists() and other.exists()  # only the last folder stays on disk
    assert cache(_fake_build, "a", size=2) != first and cache.builds == 3  # dropped, so built again


def test_keep_two_keeps_the_two_most_recently_used(tmp_path):
    cache = LayoutCache(tmp_path, keep=2)
    a, b = cache(_fake_build, "a"), cache(_fake_build, "b")
    cache(_fake_build, "a")  # a used last: b is the older one
    c = cache(_fake_build, "c")
    assert a.exists() and c.exists() and not b.exists() and cache.builds == 3


class _Item:
    """The parts of a pytest item share_module_fixtures reads."""

    def __init__(self, module: str, fixtures: dict[str, str], group: str | None = None):
        self.module = SimpleNamespace(__name__=module)
        self.fixturenames = list(fixtures)
        self._fixtureinfo = SimpleNamespace(name2fixturedefs={
            name: [SimpleNamespace(scope=scope)] for name, scope in fixtures.items()})
        self.marks = [pytest.mark.xdist_group(group).mark] if group else []
        self._id = f"{module.replace('.', '/')}.py::test_it[a@b]"

    @property
    def nodeid(self) -> str:
        return str(self._id)

    def iter_markers(self, name):
        return (m for m in self.marks if m.name == name)

    def get_closest_marker(self, name):
        return next((m for m in reversed(self.marks) if m.name == name), None)

    def add_marker(self, marker):
        self.marks.append(marker.mark)


def test_tests_using_a_module_fixture_share_one_group_and_explicit_groups_stay():
    uses = _Item("tests.e2e.test_x", {"reference": "module", "tmp_path": "function"})
    also = _Item("tests.e2e.test_x", {"reference": "module"})
    plain = _Item("tests.e2e.test_x", {"tmp_path": "function", "tiny_sana": "session"})
    grouped = _Item("tests.e2e.test_x", {"reference": "module"}, group="resume-defaults")
    elsewhere = _Item("tests.e2e.test_y", {"models": "module"})
    share_module_fixtures([uses, also, plain, grouped, elsewhere])
    assert xdist_group(uses) == xdist_group(also) == "module-fixtures:tests.e2e.test_x"
    assert xdist_group(plain) is None
    assert xdist_group(grouped) == "resume-defaults"
    assert xdist_group(elsewhere) == "module-fixtures:tests.e2e.test_y"


def test_a_group_runs_together_at_its_first_place_without_xdist():
    a1, b, a2, c, d1, a3, d2 = (_Item("m", {}, group=g) for g in ("a", None, "a", None, "d", "a", "d"))
    items = [a1, b, a2, c, d1, a3, d2]
    keep_groups_together(items)
    assert items == [a1, a2, a3, b, c, d1, d2]


def test_a_worker_names_the_group_in_the_node_id_where_pytest_reads_it():
    """pytest-xdist's loadgroup scheduler reads ``<id>@<group>``; pytest 9.2 reads node ids from ``item._id``."""
    nodeid = pytest.importorskip("_pytest.nodeid")
    grouped, plain = _Item("tests.e2e.test_x", {}, group="resume-defaults"), _Item("tests.e2e.test_x", {})
    for item in (grouped, plain):
        item._id = nodeid.NodeId.parse(item._id)
    name_groups_in_node_ids([grouped, plain])
    assert grouped.nodeid == "tests/e2e/test_x.py::test_it[a@b]@resume-defaults"
    assert plain.nodeid == "tests/e2e/test_x.py::test_it[a@b]"
    name_groups_in_node_ids([grouped])  # named once, however often it is asked
    assert grouped.nodeid.count("@resume-defaults") == 1


def test_the_workers_are_told_to_group(request):
    """A plain ``python -m pytest`` picks ``--dist loadgroup`` in conftest; the workers, which parse the command line
    again, learn it through ``pytest_configure_node``, and on a worker the grouped tests' node ids name their group."""
    config = request.config
    if not hasattr(config, "workerinput"):
        pytest.skip("not on a pytest-xdist worker")
    if config.workerinput.get("dit_lora_loadgroup"):
        assert config.getvalue("loadgroup")
        grouped = [item for item in request.session.items if xdist_group(item)]
        assert all("@" in item.nodeid for item in grouped)
