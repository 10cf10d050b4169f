"""What the suite shares to stay within its time on 2 cores: real layouts built once a session
(tests/support/real_layout.LayoutCache) and module fixtures built once per module (tests/support/scheduling.py)."""

from __future__ import annotations

import os
import sys
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


# ---- runs forked from a warm interpreter (tests/support/warm.py) ------------------------------------------------------
SCRIPT = r"""
import atexit, json, os, sys, threading, time
print(json.dumps({"pid": os.getpid(), "ppid": os.getppid(), "argv": sys.argv, "cwd": os.getcwd(),
                  "path0": sys.path[0], "name": __name__, "hash": hash("dit-lora"),
                  "fault": os.environ.get("DIT_LORA_FAULT"), "random": __import__("random").random()}))
print("to stderr", file=sys.stderr)
atexit.register(lambda: print("atexit ran"))
threading.Thread(target=lambda: (time.sleep(0.2), print("thread joined"))).start()
how = sys.argv[1]
if how in ("exit2", "exit3"):
    sys.exit(int(how[-1]))
if how == "raise":
    raise ValueError("boom")
if how == "interrupt":
    raise KeyboardInterrupt
if how == "os_exit":
    sys.stdout.flush()
    os._exit(137)
if how == "sleep":
    time.sleep(60)
if how == "wait_for_term":  # a run signalled from outside: says it is ready, ends with a code on SIGTERM
    import signal
    signal.signal(signal.SIGTERM, lambda *a: (print("got SIGTERM", file=sys.stderr, flush=True), os._exit(143)))
    print("ready\r", end="", flush=True)
    time.sleep(60)
"""


@pytest.fixture
def light_pool(tmp_path, monkeypatch):
    """A pool whose zygotes import nothing heavy (the forking, not the preload, is under test), as warm.POOL."""
    import warm

    monkeypatch.delenv("DIT_LORA_TEST_FRESH", raising=False)
    pool = warm.Pool(preload="import json")
    monkeypatch.setattr(warm, "POOL", pool)
    script = tmp_path / "scripts" / "probe.py"
    script.parent.mkdir()
    script.write_text(SCRIPT)
    yield pool, script
    pool.close()


def _report(done):
    import json

    return json.loads(done.stdout.splitlines()[0])


@pytest.mark.slow  # starts processes
def test_a_warm_run_is_its_own_process_and_exits_as_an_interpreter_does(light_pool, tmp_path):
    import os

    from warm import run_script

    pool, script = light_pool
    done = run_script(script, ["exit3"], env={"DIT_LORA_FAULT": "micro_batch:1"}, cwd=tmp_path)
    report = _report(done)
    zygote = pool.zygotes[0].proc.pid
    assert report["ppid"] == zygote and report["pid"] not in (zygote, os.getpid())
    assert report["argv"] == [str(script), "exit3"] and report["cwd"] == str(tmp_path)
    assert report["path0"] == str(script.parent) and report["name"] == "__main__"
    assert report["fault"] == "micro_batch:1"  # a variable read at run time reaches the fork
    assert done.returncode == 3 and done.stderr == "to stderr\n"
    assert done.stdout.splitlines()[1:] == ["thread joined", "atexit ran"]  # threads joined, then atexit
    failed = run_script(script, ["raise"], cwd=tmp_path)
    assert failed.returncode == 1 and "Traceback" in failed.stderr and "ValueError: boom" in failed.stderr
    assert run_script(script, ["os_exit"], cwd=tmp_path).returncode == 137
    interrupted = run_script(script, ["interrupt"], cwd=tmp_path)
    assert interrupted.returncode == -2 and "KeyboardInterrupt" in interrupted.stderr


@pytest.mark.slow  # starts processes
def test_two_zygotes_take_turns_with_their_own_hash_seeds_and_each_fork_reseeds_random(light_pool, tmp_path):
    from warm import run_script

    pool, script = light_pool
    a1, b1, a2 = (_report(run_script(script, ["ok"], cwd=tmp_path)) for _ in range(3))
    assert a1["ppid"] == a2["ppid"] != b1["ppid"]
    assert a1["hash"] == a2["hash"] != b1["hash"]  # two runs in a row: two hash seeds, as two fresh processes
    assert a1["random"] != a2["random"]  # one zygote, two forks: not the same random state


@pytest.mark.slow  # starts processes
def test_what_a_fork_cannot_honour_runs_in_a_real_subprocess(light_pool, tmp_path, monkeypatch):
    import os

    from warm import run_script

    pool, script = light_pool
    warm_ppid = _report(run_script(script, ["ok"], cwd=tmp_path))["ppid"]
    assert warm_ppid != os.getpid()
    # the variables read when a run starts (and pytest's test name, another each test) are the fork's own
    again = run_script(script, ["ok"], cwd=tmp_path, env={"DIT_LORA_FAULT": "x", "PYTEST_CURRENT_TEST": "another"})
    assert _report(again)["ppid"] not in (os.getpid(), warm_ppid) and _report(again)["fault"] == "x"
    # a variable read at import (here: any not in RUNTIME_ENV): zygotes of that environment, up to the pool's limit
    starts = {}
    for threads in range(1, pool.max_groups + 1):
        ppid = _report(run_script(script, ["ok"], cwd=tmp_path, env={"OMP_NUM_THREADS": str(threads)}))["ppid"]
        starts[threads] = ppid
    assert os.getpid() not in list(starts.values())[: pool.max_groups - 1]  # the first environment's and new ones'
    assert len({z.env.get("OMP_NUM_THREADS") for z in pool.zygotes if z is not None}) == pool.max_groups
    past = run_script(script, ["ok"], cwd=tmp_path, env={"OMP_NUM_THREADS": "99"})
    assert _report(past)["ppid"] == os.getpid()  # past the limit: a real subprocess
    # warm=False, DIT_LORA_TEST_FRESH
    assert _report(run_script(script, ["ok"], cwd=tmp_path, warm=False))["ppid"] == os.getpid()
    monkeypatch.setenv("DIT_LORA_TEST_FRESH", "1")
    assert _report(run_script(script, ["ok"], cwd=tmp_path))["ppid"] == os.getpid()


@pytest.mark.slow  # starts processes
def test_a_warm_run_past_its_timeout_is_killed_and_the_zygote_serves_the_next(light_pool, tmp_path):
    import subprocess

    from warm import run_script

    import shutil

    from warm import start_script

    pool, script = light_pool
    with pytest.raises(subprocess.TimeoutExpired) as timed_out:
        run_script(script, ["sleep"], cwd=tmp_path, timeout=2)
    # where it was stuck, in the failure: the script's own frame (py-spy), or why there is no stack
    spy = shutil.which("py-spy", path=f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}")
    assert ("probe.py" if spy else "no py-spy installed") in timed_out.value.stderr, timed_out.value.stderr
    with start_script(script, ["sleep"], cwd=tmp_path) as started, pytest.raises(subprocess.TimeoutExpired) as late:
        started.read_until("to stderr", timeout=30)
        started.wait(1)
    assert ("probe.py" if spy else "no py-spy installed") in late.value.stderr, late.value.stderr
    assert run_script(script, ["exit3"], cwd=tmp_path).returncode == 3
    assert run_script(script, ["exit3"], cwd=tmp_path).returncode == 3  # both zygotes still serve


@pytest.mark.slow  # starts processes
def test_a_zygote_that_gives_no_reply_after_a_timeout_is_replaced(light_pool, tmp_path, monkeypatch):
    """A timed-out run whose processes are gone already (no kill to make) and whose zygote then gives no reply: the
    zygote is ended rather than left with its replies out of step, and the pool serves the next run from a fresh
    one (a hung two-rank run once broke every later warm run of its worker this way)."""
    import subprocess

    import warm
    from warm import run_script

    pool, script = light_pool
    assert run_script(script, ["exit3"], cwd=tmp_path).returncode == 3  # the first zygote, started
    zygote = next(z for z in pool.zygotes if z is not None)

    def no_reply(timeout):
        raise subprocess.TimeoutExpired("a warm interpreter's reply", timeout)

    monkeypatch.setattr(zygote, "_reply", no_reply)
    zygote._after_timeout([2**22 + 12345])  # no such process: nothing to kill
    assert not zygote.alive()
    monkeypatch.undo()
    monkeypatch.delenv("DIT_LORA_TEST_FRESH", raising=False)
    monkeypatch.setattr(warm, "POOL", pool)
    assert all(run_script(script, ["exit3"], cwd=tmp_path).returncode == 3 for _ in range(pool.size))


@pytest.mark.slow  # starts processes
def test_a_resume_is_forked_from_the_zygote_that_did_not_write_its_folder(light_pool, tmp_path):
    from warm import run_script

    pool, script = light_pool
    out, other = str(tmp_path / "out"), str(tmp_path / "other")
    writer = _report(run_script(script, ["ok", "--output_dir", out], cwd=tmp_path))  # zygote 0
    _report(run_script(script, ["ok", "--output_dir", other], cwd=tmp_path))  # zygote 1: zygote 0's turn next
    resumed = _report(run_script(script, ["ok", "--output_dir", out, "--resume_from_checkpoint", "latest"],
                                 cwd=tmp_path))
    assert resumed["ppid"] != writer["ppid"] and resumed["hash"] != writer["hash"]
    # the resumed run wrote the folder last; one refused at its start (exit 2) wrote nothing, so the next resume
    # still goes to the zygote that did not run the resumed one
    refused = run_script(script, ["exit2", "--output_dir", out, "--resume_from_checkpoint", "latest"], cwd=tmp_path)
    assert refused.returncode == 2 and _report(refused)["ppid"] != resumed["ppid"]
    again = _report(run_script(script, ["ok", "--output_dir", out, "--resume_from_checkpoint", "latest"],
                               cwd=tmp_path))
    assert again["ppid"] != resumed["ppid"]
    # a checkpoint named by its path: the folder holding it is the one whose writer counts
    named = _report(run_script(script, ["ok", "--output_dir", str(tmp_path / "third"), "--resume_from_checkpoint",
                                        f"{other}/checkpoint-4"], cwd=tmp_path))
    assert named["ppid"] == writer["ppid"]  # other's writer was zygote 1



@pytest.mark.slow  # starts processes
def test_a_started_warm_run_is_signalled_from_outside_and_read_as_it_writes(light_pool, tmp_path):
    """start_script: the run forked in the background, its output (stdout and stderr in one file) read up to a
    line, a signal sent to its pid, its exit code; the pool serves the next run after it, and a run the test leaves
    behind is killed. What cannot be forked (here warm=False) is a real subprocess with the same interface."""
    import json
    import os
    import signal

    from warm import run_script, start_script

    pool, script = light_pool
    for warm in (True, False):
        with start_script(script, ["wait_for_term"], cwd=tmp_path, warm=warm) as proc:
            early = proc.read_until("ready", timeout=30)  # a line ended by a carriage return, as tqdm's
            parent = json.loads(early.splitlines()[0])["ppid"]
            assert parent == (pool.zygotes[0].proc.pid if warm else os.getpid())
            proc.send_signal(signal.SIGTERM)
            assert proc.wait(30) == 143 and "got SIGTERM" in proc.output() and "to stderr" in proc.output()
    with pytest.raises(AssertionError, match="never saw 'nothing like this'"):  # the run ended first
        with start_script(script, ["exit3"], cwd=tmp_path) as proc:
            proc.read_until("nothing like this", timeout=30)
    with start_script(script, ["sleep"], cwd=tmp_path) as left:
        left.read_until("pid", timeout=30)
    assert left.returncode == -9  # killed as the block ended
    assert run_script(script, ["exit3"], cwd=tmp_path).returncode == 3  # the pool serves the next run

LAUNCHED = r"""
import json, os, sys, time
how = sys.argv[1]
rank = int(os.environ["RANK"])
if how == "gloo":
    import torch, torch.distributed as dist
    dist.init_process_group("gloo")  # the rendezvous without an agent: rank 0 hosts the store
    total = torch.tensor([rank + 1])
    dist.all_reduce(total)
    keys = ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_PORT", "DIT_LORA_LAUNCHED", "DIT_LORA_LAUNCHED_COMMAND")
    print(json.dumps({"ppid": os.getppid(), "sum": int(total), **{k: os.environ.get(k) for k in keys}}), flush=True)
    os._exit(0)
if rank == 1:
    sys.exit(3)
time.sleep(60)  # rank 0: stopped by the launch once rank 1 has failed
"""


@pytest.mark.slow  # starts processes
def test_a_warm_launch_forks_every_process_with_the_launchs_environment(light_pool, tmp_path):
    """The processes of `dit-lora launch --multi_gpu --num_processes 2` forked together from one zygote, each with
    what the real launch gives it (learned from one), meet in a gloo group; a failing one stops the other and its
    code is the launch's."""
    import json
    import time

    from warm_launch import launch

    pool, _ = light_pool
    script = tmp_path / "launched.py"
    script.write_text(LAUNCHED)
    from helpers import free_port

    port = str(free_port())
    options = ["--multi_gpu", "--num_processes", "2", "--num_machines", "1", "--mixed_precision", "no",
               "--dynamo_backend", "no", "--main_process_port", port]
    done = launch(options, script, ["gloo"], env={"OMP_NUM_THREADS": "1"}, timeout=120)
    assert done.returncode == 0, done.stdout + done.stderr
    ranks = [json.loads(line) for line in done.stdout.splitlines() if line.startswith("{")]
    assert [r["RANK"] for r in ranks] == ["0", "1"] and {r["WORLD_SIZE"] for r in ranks} == {"2"}
    assert {r["sum"] for r in ranks} == {3} and {r["MASTER_PORT"] for r in ranks} == {port}
    assert len({r["ppid"] for r in ranks}) == 1 and ranks[0]["ppid"] in [z.proc.pid for z in pool.zygotes if z]
    assert {r["DIT_LORA_LAUNCHED"] for r in ranks} == {"1"}
    assert ranks[0]["DIT_LORA_LAUNCHED_COMMAND"] == "dit-lora launch " + " ".join(options)
    started = time.monotonic()
    failed = launch(options[:-2], script, ["fail"], env={"OMP_NUM_THREADS": "1"}, timeout=120)
    assert failed.returncode == 3 and time.monotonic() - started < 30, failed.stdout + failed.stderr
