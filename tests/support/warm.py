"""Script runs forked from a warm interpreter (``run_recipe(..., warm=True)``, :func:`run_script`): what a
``python recipes/<family>_lora.py ...`` process costs before its first line of dit-lora runs (torch, diffusers,
transformers, peft and accelerate imported: about 6 s of CPU on a CI core, most of a tiny run's cost) paid once
per pytest worker instead of once per run.

A *zygote* is a fresh ``python`` (started the first time a worker asks, with the run's environment) that imports
what every recipe imports (:data:`PRELOAD`) and waits. A run is a ``fork()`` of it that becomes the script's process:
its own pid, stdin from /dev/null, stdout and stderr to files, the run's environment, working directory,
``sys.argv`` and ``sys.path[0]`` (the script's folder), the script run as ``__main__``, then the interpreter's exit:
non-daemon threads joined, ``atexit`` functions run, the exit status (an uncaught exception: its traceback and 1;
an uncaught KeyboardInterrupt: killed by SIGINT; ``os._exit`` and signals as in any process). Two zygotes take
turns, so two runs in a row (a test comparing them) have different string hash seeds, as two fresh processes do.

What a fork does not get fresh is what an interpreter decides once, at start or at import. So a run is forked only
from zygotes started with its environment (outside :data:`RUNTIME_ENV`, the variables read when a run starts, not at
import): each start environment gets its own two, up to :class:`Pool`'s limit; past it, or when
``DIT_LORA_TEST_FRESH=1`` is set, a run is a real subprocess (every run a real subprocess: the suite as it
ran before this module). And a run that resumes (``--resume_from_checkpoint``) is forked from the other zygote than
the one whose run wrote its output folder: a resumed process never shares the writer's hash seed and memory layout,
so a resume that depends on them (an order of names or objects from a set) fails here as it would for a user.

A test that acts on a run from outside while it runs (a signal at some line of its output) starts it with
:func:`start_script`, forked the same way. Tests of the process itself (start-up time, what it imports or prints at
import, its CPU time seen from outside, a signal disposition it starts with, launchers) keep real subprocesses: they
do not ask for ``warm``.
"""

from __future__ import annotations

import atexit
import contextlib
import json
import os
import select
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

#: environment variables read when a run starts, never at import (dit-lora's drills and checks: training/drills.py,
#: doctor.py; the disk-full tests' wrapper, tests/e2e/test_disk_full.py; pytest's name of the running test, which no
#: library reads): a run that differs from the zygote only in
#: these may be a fork of it (it gets its own values)
RUNTIME_ENV = frozenset({"DIT_LORA_FAULT", "DIT_LORA_SIGNAL", "DIT_LORA_SYNC_DEBUG", "DIT_LORA_SKIP_ENV_CHECK",
                         "PYTEST_CURRENT_TEST", "DIT_LORA_TEST_ENOSPC_RANK", "DIT_LORA_TEST_ENOSPC_STEP",
                         # huggingface_hub reads the token when a request needs it (utils/_auth.py), accelerate
                         # its engine variables when the Accelerator's state is made (state.py, accelerator.py)
                         "HF_TOKEN", "ACCELERATE_USE_FSDP", "ACCELERATE_USE_DEEPSPEED",
                         # read when CUDA starts, on first use (never here: a zygote refuses a CUDA made at import)
                         "CUDA_VISIBLE_DEVICES",
                         # read by inductor when it first needs its cache (cache_dir_utils.cache_dir), which also
                         # writes it into os.environ: a worker gains it mid-suite, at its first compile or kernel
                         # check, and every later run would have looked like another start environment
                         "TORCHINDUCTOR_CACHE_DIR",
                         # the address inductor's C++ loader leaves in os.environ (codecache.py), set again by any
                         # process before its own load reads it
                         "_TORCHINDUCTOR_PYOBJECT_TENSOR_DATA_PTR"})

#: the option that makes a run a resume (see the module docstring)
RESUME_OPTION = "--resume_from_checkpoint"

#: what the recipe processes import before they train: the recipe module, the loop, every registered family's spec
#: and the pipeline class it trains (diffusers' or transformers'), pyplot on its file backend (the loss curve)
PRELOAD = r"""
import re
re._MAXCACHE = max(re._MAXCACHE, 4096)  # as tests/conftest.py: transformers' conversion table outgrows re's cache
import dit_lora.commands.recipe, dit_lora.commands.doctor, dit_lora.training.loop, dit_lora.training.run
import accelerate, diffusers, peft, safetensors.torch, transformers
from dit_lora.output.report import load_pyplot
from dit_lora.registry import available, get_spec
load_pyplot()
# transformers builds its checkpoint-conversion table (about 1,100 regular expressions compiled) at a process's first
# from_pretrained or adapter injection (0.08 s in a fresh process; 83 CPU-s over a suite's forks, py-spy): built
# here once for every fork
from transformers.conversion_mapping import get_checkpoint_conversion_mapping
get_checkpoint_conversion_mapping("llama")
for _name in available():
    _cls = get_spec(_name).info.pipeline_class_name
    getattr(diffusers, _cls, None) or getattr(transformers, _cls, None)
# what every run's environment check imports (dit_lora/commands/doctor_versions.py, IMPORT_CHECKED and the optional ones):
# about half a second of each run otherwise
import importlib
for _name in ("datasets", "av", "triton", "bitsandbytes"):
    try:
        importlib.import_module(_name)
    except Exception:
        pass
# the plan's trace cache key: this checkout's source, read once per zygote rather than once per run
from dit_lora.plan.trace_cache import code_digest
code_digest()
"""

SERVER = r"""
import json, os, resource, sys
control = os.fdopen(int(os.environ.pop("DIT_LORA_WARM_FD")), "w")
preload = os.environ.pop("DIT_LORA_WARM_PRELOAD")
sys.path[0] = os.path.join(os.getcwd(), "recipes")
exec(compile(preload, "<preload>", "exec"), {"__name__": "__preload__"})
_torch = sys.modules.get("torch")
if _torch is not None and _torch.cuda.is_initialized():  # a fork cannot use a CUDA context made before it
    raise SystemExit("CUDA was initialised while importing: runs cannot be forked")
sys.stdout.flush(); sys.stderr.flush()

def _child(req):
    import atexit, random, runpy, signal, threading
    control.close()
    for fd, path, flags in ((0, os.devnull, os.O_RDONLY), (1, req["stdout"], os.O_WRONLY | os.O_CREAT | os.O_TRUNC),
                            (2, req["stderr"], os.O_WRONLY | os.O_CREAT | os.O_TRUNC)):
        if fd == 2 and path == req["stdout"]:  # stderr=STDOUT: one file, one offset
            os.dup2(1, 2)
            continue
        opened = os.open(path, flags, 0o644)
        os.dup2(opened, fd)
        os.close(opened)
    os.environ.clear()
    os.environ.update(req["env"])
    os.chdir(req["cwd"])
    sys.argv = list(req["argv"])
    sys.path[0] = os.path.dirname(os.path.abspath(sys.argv[0]))
    random.seed()  # a fresh interpreter seeds these from the OS; a fork would repeat the zygote's state
    if "numpy" in sys.modules:
        sys.modules["numpy"].random.seed()
    code, interrupted = 0, False
    try:
        runpy.run_path(sys.argv[0], run_name="__main__")
    except SystemExit as stop:
        if isinstance(stop.code, int) or stop.code is None:
            code = stop.code or 0
        else:
            print(stop.code, file=sys.stderr)
            code = 1
    except KeyboardInterrupt:
        sys.excepthook(*sys.exc_info())
        interrupted = True
    except BaseException:
        sys.excepthook(*sys.exc_info())
        code = 1
    try:  # the interpreter's exit: threads, then atexit, then the streams
        threading._shutdown()
        atexit._run_exitfuncs()
        sys.stdout.flush()
        sys.stderr.flush()
    except BaseException:
        pass
    if interrupted:
        signal.signal(signal.SIGINT, signal.SIG_DFL)
        os.kill(os.getpid(), signal.SIGINT)
    os._exit(code & 0xFF)

_own = resource.getrusage(resource.RUSAGE_SELF)
control.write(json.dumps({"ready": os.getpid(), "cpu": _own.ru_utime + _own.ru_stime}) + "\n")
control.flush()
def _fork(req):
    pid = os.fork()
    if pid == 0:
        try:
            _child(req)
        finally:
            os._exit(1)
    return pid

def _wait_group(pids, failure_timeout):
    # torchrun's agent: once a process fails, the others get SIGTERM, and SIGKILL after the timeout
    import signal, time
    statuses, cpu, stopped_at = {}, 0.0, None
    while len(statuses) < len(pids):
        for pid in pids:
            if pid not in statuses:
                got, status, usage = os.wait4(pid, os.WNOHANG)
                if got:
                    statuses[pid] = status
                    cpu += usage.ru_utime + usage.ru_stime
        failed = any(os.waitstatus_to_exitcode(s) != 0 for s in statuses.values())
        if failed and stopped_at is None:
            stopped_at = time.monotonic()
            for pid in pids:
                if pid not in statuses:
                    os.kill(pid, signal.SIGTERM)
        elif stopped_at is not None and time.monotonic() - stopped_at > failure_timeout:
            for pid in pids:
                if pid not in statuses:
                    os.kill(pid, signal.SIGKILL)
            stopped_at = float("inf")
        time.sleep(0.02)
    return [statuses[pid] for pid in pids], cpu

for line in sys.stdin:
    req = json.loads(line)
    if "group" in req:  # the processes of one launch, forked together
        pids = [_fork(r) for r in req["group"]]
        control.write(json.dumps({"pids": pids}) + "\n")
        control.flush()
        statuses, cpu = _wait_group(pids, req["failure_timeout"])
        control.write(json.dumps({"statuses": statuses, "cpu": cpu}) + "\n")
        control.flush()
        continue
    pid = _fork(req)
    control.write(json.dumps({"pid": pid}) + "\n")
    control.flush()
    _, status, usage = os.wait4(pid, 0)
    control.write(json.dumps({"status": status, "cpu": usage.ru_utime + usage.ru_stime}) + "\n")
    control.flush()
"""

#: CPU seconds the zygotes and their runs used so far (they are not this process's waited children, so
#: ``resource.getrusage(RUSAGE_CHILDREN)`` does not see them)
CPU = {"seconds": 0.0}


class Zygote:
    """One warm interpreter; :meth:`run` forks a script's process from it."""

    def __init__(self, env: dict[str, str], preload: str = PRELOAD, timeout: float = 600) -> None:
        self.env = dict(env)
        handle, self.log = tempfile.mkstemp(prefix="dit-lora-zygote-", suffix=".log")  # its own output
        read, write = os.pipe()
        try:
            self.proc = subprocess.Popen(
                [sys.executable, "-c", SERVER], cwd=ROOT, stdin=subprocess.PIPE, stdout=handle, stderr=handle,
                pass_fds=(write,), text=True,
                env={**self.env, "DIT_LORA_WARM_PRELOAD": preload, "DIT_LORA_WARM_FD": str(write)})
        finally:
            os.close(write)
            os.close(handle)
        self.control = os.fdopen(read)
        ready = self._reply(timeout)
        if "ready" not in ready:
            raise RuntimeError(f"the warm interpreter did not start: {ready}")
        CPU["seconds"] += ready["cpu"]

    def _reply(self, timeout: float) -> dict:
        if not select.select([self.control], [], [], timeout)[0]:
            raise subprocess.TimeoutExpired("a warm interpreter's reply", timeout)
        line = self.control.readline()
        if not line:
            self.proc.wait()
            raise RuntimeError(f"the warm interpreter ended (exit {self.proc.returncode}):\n"
                               + Path(self.log).read_text(errors="replace")[-4000:])
        return json.loads(line)

    def alive(self) -> bool:
        return self.proc.poll() is None

    def _after_timeout(self, pids: list[int]) -> str:
        """A run that outlived its timeout: where its processes are stuck (:func:`stacks`, returned), then they are
        killed (those still there) and the zygote's reply for them read. A zygote that gives none is ended, so the pool
        starts a fresh one: never one whose replies are out of step with its requests (a later run would read this
        run's reply, or time out waiting)."""
        where = stacks(pids)
        for pid in pids:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, 9)
        try:
            self._reply(60)
        except (subprocess.TimeoutExpired, RuntimeError):
            self.proc.kill()
            self.proc.wait()
        return where

    def run(self, argv: list[str], env: dict[str, str], cwd: Path, timeout: float) -> subprocess.CompletedProcess:
        """``argv`` (a script and its arguments) as a fork of this zygote; like ``subprocess.run(capture_output=True,
        text=True)``, TimeoutExpired after ``timeout`` seconds (the run killed)."""
        with tempfile.TemporaryDirectory(prefix="dit-lora-warm-run-") as tmp:
            out, err = Path(tmp) / "stdout", Path(tmp) / "stderr"
            request = {"argv": [str(a) for a in argv], "env": env, "cwd": str(cwd), "stdout": str(out),
                       "stderr": str(err)}
            self.proc.stdin.write(json.dumps(request) + "\n")
            self.proc.stdin.flush()
            pid = self._reply(60)["pid"]
            try:
                done = self._reply(timeout)
            except subprocess.TimeoutExpired:
                where = self._after_timeout([pid])
                raise subprocess.TimeoutExpired(argv, timeout, out.read_text(errors="replace"),
                                                err.read_text(errors="replace") + where) from None
            CPU["seconds"] += done["cpu"]
            return subprocess.CompletedProcess([sys.executable, *argv], os.waitstatus_to_exitcode(done["status"]),
                                               out.read_text(errors="replace"), err.read_text(errors="replace"))

    def start(self, argv: list[str], env: dict[str, str], cwd: Path, log: Path) -> int:
        """``argv`` forked from this zygote without waiting: its pid (stdout and stderr both to ``log``). The zygote
        serves nothing else until :meth:`finish` has read the run's end."""
        request = {"argv": [str(a) for a in argv], "env": env, "cwd": str(cwd), "stdout": str(log),
                   "stderr": str(log)}
        self.proc.stdin.write(json.dumps(request) + "\n")
        self.proc.stdin.flush()
        return self._reply(60)["pid"]

    def ended(self) -> bool:
        """Whether the run :meth:`start` began has ended (the zygote's reply is waiting)."""
        return bool(select.select([self.control], [], [], 0)[0])

    def finish(self, pid: int, timeout: float) -> int:
        """The exit code of the run :meth:`start` began (as ``Popen.returncode``); TimeoutExpired after ``timeout``
        seconds, the run killed."""
        try:
            done = self._reply(timeout)
        except subprocess.TimeoutExpired:
            where = self._after_timeout([pid])
            raise subprocess.TimeoutExpired(f"the started run {pid}", timeout, stderr=where) from None
        CPU["seconds"] += done["cpu"]
        return os.waitstatus_to_exitcode(done["status"])

    def run_group(self, runs: list[tuple[list[str], dict[str, str]]], cwd: Path, timeout: float,
                  failure_timeout: float) -> list[subprocess.CompletedProcess]:
        """The processes of one launch (``(argv, env)`` each), forked together; once one fails the others get SIGTERM,
        and SIGKILL ``failure_timeout`` seconds later, as torchrun's agent does. One CompletedProcess a process."""
        with tempfile.TemporaryDirectory(prefix="dit-lora-warm-launch-") as tmp:
            files = [(Path(tmp) / f"stdout{i}", Path(tmp) / f"stderr{i}") for i in range(len(runs))]
            group = [{"argv": [str(a) for a in argv], "env": env, "cwd": str(cwd), "stdout": str(out),
                      "stderr": str(err)} for (argv, env), (out, err) in zip(runs, files)]
            self.proc.stdin.write(json.dumps({"group": group, "failure_timeout": failure_timeout}) + "\n")
            self.proc.stdin.flush()
            pids = self._reply(60)["pids"]
            try:
                done = self._reply(timeout)
            except subprocess.TimeoutExpired:
                where = self._after_timeout(pids)
                raise subprocess.TimeoutExpired([argv for argv, _ in runs], timeout,
                                                "".join(out.read_text(errors="replace") for out, _ in files),
                                                "".join(err.read_text(errors="replace") for _, err in files) + where
                                                ) from None
            CPU["seconds"] += done["cpu"]
            return [subprocess.CompletedProcess([sys.executable, *argv], os.waitstatus_to_exitcode(status),
                                                out.read_text(errors="replace"), err.read_text(errors="replace"))
                    for (argv, _), status, (out, err) in zip(runs, done["statuses"], files)]

    def close(self) -> None:
        if self.alive():
            self.proc.stdin.close()
            try:
                self.proc.wait(timeout=60)
            except subprocess.TimeoutExpired:
                self.proc.kill()
        Path(self.log).unlink(missing_ok=True)


def stacks(pids: list[int]) -> str:
    """Where each of ``pids`` is now, Python and native frames (``py-spy dump``, when installed beside this
    interpreter or on PATH): what a run that timed out was waiting for, in the test's failure."""
    import shutil

    spy = shutil.which("py-spy", path=f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}")
    if spy is None:
        return "\n[no py-spy installed: the stuck processes' stacks were not taken]\n"
    found = []
    for pid in pids:
        try:
            dump = subprocess.run([spy, "dump", "--native", "--pid", str(pid)], capture_output=True, text=True,
                                  timeout=60)
            found.append(f"\n--- pid {pid} when it timed out (py-spy dump --native):\n{dump.stdout}{dump.stderr}")
        except (OSError, subprocess.TimeoutExpired) as e:
            found.append(f"\n--- pid {pid}: no stack ({e})")
    return "".join(found)


def enabled() -> bool:
    """Whether runs may be forked at all (``DIT_LORA_TEST_FRESH=1`` says no)."""
    return os.environ.get("DIT_LORA_TEST_FRESH", "").lower() not in ("1", "true", "yes")


def same_start(env: dict[str, str], zygote_env: dict[str, str]) -> bool:
    """Whether a process started with ``env`` imports what one started with ``zygote_env`` does: the two differ only
    in :data:`RUNTIME_ENV` variables."""
    return all(env.get(k) == zygote_env.get(k) for k in (set(env) | set(zygote_env)) - RUNTIME_ENV)


class _Group:
    """The zygotes of one start environment (two, taking turns) and which of them wrote each output folder."""

    def __init__(self, env: dict[str, str], size: int) -> None:
        self.env = env
        self.zygotes: list[Zygote | None] = [None] * size
        self.turn = 0
        self.writers: dict[str, int] = {}  # output folder -> the zygote whose run wrote it last


class Pool:
    """This process's zygotes: for each start environment asked for (up to ``groups`` of them; a run of another is a
    real subprocess), two taking turns, each started the first time it is needed with that environment (a resume on
    the one that did not write its output folder). Why several: the launched runs (OMP_NUM_THREADS=1, the launch's
    own variables) start with another environment than the plain ones, and a worker that met one kind first ran every
    run of the other as a real subprocess, 10-20 s of imports each."""

    def __init__(self, size: int = 2, preload: str = PRELOAD, groups: int = 3) -> None:
        self.size, self.preload, self.max_groups = size, preload, groups
        self.groups: list[_Group] = []
        self.lock = threading.Lock()

    @property
    def zygotes(self) -> list[Zygote | None]:
        """Every zygote of every start environment, in the order they were set up (None: not started yet)."""
        return [z for group in self.groups for z in group.zygotes]

    def run(self, argv: list[str], env: dict[str, str], cwd: Path, timeout: float):
        """The run as a fork of a zygote, or None when it must be a real subprocess."""
        if not enabled():
            return None
        argv = [str(a) for a in argv]
        with self.lock:
            picked = self._pick(argv, env, cwd)
            if picked is None:
                return None
            group, i, zygote, folder = picked
            done = zygote.run(argv, env, cwd, timeout)
            if folder and done.returncode != 2:  # 2: refused at the start (a user error), nothing written
                group.writers[folder] = i
            return done

    def run_group(self, runs: list[tuple[list[str], dict[str, str]]], start_env: dict[str, str], cwd: Path,
                  timeout: float, failure_timeout: float):
        """The processes of one launch forked from one zygote (:meth:`Zygote.run_group`), or None when they must be a
        real launch. ``start_env``: the environment the launcher was given (the processes' own add what the launch
        sets, read when a run starts)."""
        if not enabled():
            return None
        runs = [([str(a) for a in argv], env) for argv, env in runs]
        with self.lock:
            picked = self._pick(runs[0][0], start_env, cwd)
            if picked is None:
                return None
            group, i, zygote, folder = picked
            done = zygote.run_group(runs, cwd, timeout, failure_timeout)
            if folder and all(d.returncode != 2 for d in done):
                group.writers[folder] = i
            return done

    def start(self, argv: list[str], env: dict[str, str], cwd: Path, log: Path):
        """``(zygote, pid, done)`` of ``argv`` forked in the background (:meth:`Zygote.start`), or None when it must
        be a real subprocess. The pool is held until ``done(timeout) -> exit code`` is called (it always releases)."""
        if not enabled():
            return None
        argv = [str(a) for a in argv]
        self.lock.acquire()
        try:
            picked = self._pick(argv, env, cwd)
            if picked is None:
                self.lock.release()
                return None
            group, i, zygote, folder = picked
            pid = zygote.start(argv, env, cwd, log)
        except BaseException:
            self.lock.release()
            raise

        def done(timeout: float) -> int:
            try:
                code = zygote.finish(pid, timeout)
                if folder and code != 2:
                    group.writers[folder] = i
                return code
            finally:
                self.lock.release()
        return zygote, pid, done

    def _group(self, start_env: dict[str, str]) -> _Group | None:
        """The zygotes of ``start_env``'s environment, set up on first use; None past :attr:`max_groups`."""
        found = next((g for g in self.groups if same_start(start_env, g.env)), None)
        if found is None and len(self.groups) < self.max_groups:
            found = _Group({k: v for k, v in start_env.items() if k not in RUNTIME_ENV}, self.size)
            self.groups.append(found)
        return found

    def _pick(self, argv: list[str], start_env: dict[str, str], cwd: Path):
        """(group, index, zygote, output folder) for a run of ``argv`` whose process would start with ``start_env``;
        None when it cannot be forked. Called under the lock."""
        out = _option(argv, "--output_dir")
        folder = str(Path(cwd, out).resolve()) if out else None
        group = self._group(start_env)
        if group is None:
            return None
        i = group.turn
        resume = _option(argv, RESUME_OPTION)
        if resume is not None:  # the checkpoint's folder: the output folder, or the one the path names
            written = folder if resume == "latest" else str(Path(cwd, resume).resolve().parent)
            writer = group.writers.get(written) if written else None
            if writer is not None:
                if self.size < 2:
                    return None
                i = (writer + 1) % self.size
        zygote = group.zygotes[i]
        if zygote is None or not zygote.alive():
            zygote = group.zygotes[i] = Zygote(group.env, self.preload)
        group.turn = (i + 1) % self.size
        return group, i, zygote, folder

    def close(self) -> None:
        for zygote in self.zygotes:
            if zygote is not None:
                zygote.close()
        self.groups = []


def _option(argv: list[str], flag: str) -> str | None:
    """The value after ``flag`` in ``argv`` (the last one), if any."""
    found = [argv[i + 1] for i, a in enumerate(argv[:-1]) if a == flag]
    return found[-1] if found else None


POOL = Pool()
atexit.register(POOL.close)


def run_script(script: Path | str, args: list[str], *, env: dict[str, str] | None = None, timeout: float = 300,
               cwd: Path = ROOT, warm: bool = True) -> subprocess.CompletedProcess:
    """``python <script> <args>`` with its output captured (text), forked from a zygote when ``warm`` and
    :class:`Pool` allows it, else a real subprocess; ``env`` is added to this process's environment."""
    full_env = {**os.environ, "PYTHONUNBUFFERED": "1", **(env or {})}
    argv = [str(script), *map(str, args)]
    if warm:
        done = POOL.run(argv, full_env, cwd, timeout)
        if done is not None:
            return done
    return subprocess.run([sys.executable, *argv], capture_output=True, text=True, env=full_env, timeout=timeout,
                          cwd=cwd)


def run_ranks(script: Path | str, args: list[str], world: int, *, env: dict[str, str] | None = None,
              timeout: float = 300, cwd: Path = ROOT, warm: bool = True) -> list[subprocess.CompletedProcess]:
    """``python <script> <args>`` as the ``world`` processes of one torch.distributed group, each with ``RANK``,
    ``LOCAL_RANK``, ``WORLD_SIZE``, ``MASTER_ADDR`` and a free ``MASTER_PORT`` (``init_process_group``'s ``env://``
    meets; rank 0 hosts the store), one CompletedProcess a rank. Forked together from a zygote when ``warm`` and
    :class:`Pool` allows it (once one fails the others get SIGTERM), else real subprocesses. For a test of what the
    processes compute together, not of a launcher (tests/support/warm_launch.py runs a launch's processes)."""
    from helpers import free_port

    full_env = {**os.environ, "PYTHONUNBUFFERED": "1", **(env or {})}
    argv = [str(script), *map(str, args)]
    group = {"WORLD_SIZE": str(world), "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(free_port())}
    runs = [(argv, {**full_env, **group, "RANK": str(rank), "LOCAL_RANK": str(rank)}) for rank in range(world)]
    if warm:
        done = POOL.run_group(runs, full_env, cwd, timeout, failure_timeout=30)
        if done is not None:
            return done
    procs = [subprocess.Popen([sys.executable, *argv], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                              env=rank_env, cwd=cwd) for argv, rank_env in runs]
    outs = []
    for proc in procs:
        try:
            outs.append(proc.communicate(timeout=timeout))
        except subprocess.TimeoutExpired:
            for other in procs:
                other.kill()
            raise
    return [subprocess.CompletedProcess(proc.args, proc.returncode, out, err) for proc, (out, err) in zip(procs, outs)]


class Started:
    """A script's process running in the background (:func:`start_script`), for a test that acts on it from outside
    while it runs (a signal at some line of its output): its pid, its output so far (stdout and stderr in one file,
    as ``stderr=STDOUT``), its exit code once :meth:`wait` returns."""

    def __init__(self, pid: int, log: Path, ended, finish) -> None:
        self.pid, self.log, self._ended, self._finish = pid, log, ended, finish
        self.returncode: int | None = None
        self.waited = False  # wait() was called (once: a second would read a reply that is not coming)

    def output(self) -> str:
        """Everything the process has written so far."""
        return self.log.read_text(errors="replace")

    def read_until(self, needle: str, timeout: float = 240) -> str:
        """The output once a line of it (tqdm's carriage returns split lines) holds ``needle``; AssertionError with
        the output when the process ends or ``timeout`` seconds pass first. Polls the file (no fixed wait)."""
        deadline = time.monotonic() + timeout
        while True:
            ended = self._ended()  # before reading: what an ended process wrote is all in the file
            text = self.output()
            if any(needle in line for line in text.replace("\r", "\n").split("\n")):
                return text
            if ended or time.monotonic() > deadline:
                raise AssertionError(f"never saw {needle!r}:\n{text}")
            time.sleep(0.05)

    def send_signal(self, signum: int) -> None:
        os.kill(self.pid, signum)

    def wait(self, timeout: float) -> int:
        """The exit code (``Popen.returncode``'s convention); TimeoutExpired after ``timeout`` seconds, the process
        killed."""
        if not self.waited:
            self.waited = True
            self.returncode = self._finish(timeout)
        return self.returncode


@contextlib.contextmanager
def start_script(script: Path | str, args: list[str], *, env: dict[str, str] | None = None, cwd: Path = ROOT,
                 warm: bool = True):
    """``python <script> <args>`` running in the background as a :class:`Started`: forked from a zygote when
    ``warm`` and :class:`Pool` allows it, else a real subprocess. For a test of what a run does when signalled from
    outside (a fork is the same code path from the script's first line); a test of the process's own start, or of
    a launcher, asks ``warm=False``. A process still running when the block ends is killed. The pool serves no other
    run until the block ends: start the next warm run (a resume) after it."""
    full_env = {**os.environ, "PYTHONUNBUFFERED": "1", **(env or {})}
    argv = [str(script), *map(str, args)]
    with tempfile.TemporaryDirectory(prefix="dit-lora-started-") as tmp:
        log = Path(tmp) / "output"
        log.touch()  # readable before the fork opens it
        started = POOL.start(argv, full_env, cwd, log) if warm else None
        if started is not None:
            zygote, pid, done = started
            proc = Started(pid, log, zygote.ended, done)
        else:
            with open(log, "w") as out:
                popen = subprocess.Popen([sys.executable, *argv], stdout=out, stderr=subprocess.STDOUT,
                                         stdin=subprocess.DEVNULL, env=full_env, cwd=cwd)

            def finish(timeout: float) -> int:
                try:
                    return popen.wait(timeout)
                except subprocess.TimeoutExpired:
                    popen.kill()
                    popen.wait()
                    raise
            proc = Started(popen.pid, log, lambda: popen.poll() is not None, finish)
        try:
            yield proc
        finally:
            if not proc.waited:  # the test failed before its wait: the run must not outlive it
                with contextlib.suppress(ProcessLookupError):  # a fork that ended is reaped by its zygote
                    os.kill(proc.pid, 9)
                proc.wait(60)
