"""``dit-lora launch`` runs whose processes are forked from a warm interpreter (warm.py), for tests of what a launched
run does (two processes agreeing, sharding, resuming), not of the launcher itself.

A real ``dit-lora launch --multi_gpu ...`` on a CI core costs a launcher and two fresh interpreters importing torch,
diffusers, transformers and peft: about 15 s of CPU before the first line of training, most of a tiny run. Here:

* **What the launch gives its processes is learned from the launch itself**, once per launch options: a real
  ``dit-lora launch`` of a script that writes each process's environment (:data:`DUMP`). What it added or changed is
  what every later run of those options gets (accelerate's ``ACCELERATE_*``, torchrun's ``RANK`` and ``WORLD_SIZE``,
  dit-lora's ``DIT_LORA_LAUNCHED``...), on top of the test's own environment, with the values that belong to one run
  rewritten: a free ``MASTER_PORT`` (or the ``--main_process_port`` given), the rendezvous store hosted by rank 0
  (there is no agent), the launch command with its port.
* **The processes are forked together** from a zygote (``Zygote.run_group``): once one fails the others get SIGTERM,
  and SIGKILL after ``dit-lora launch``'s failure timeout, as torchrun's agent does; the exit code is the one
  ``dit-lora launch`` reports (a process's own failure first); stdout and stderr are every process's, in rank order.

What the launcher itself does (its signal forwarding, its messages, its exit codes for a killed agent) is not here:
those tests run the real launcher (``warm=False``, or a launch the pool cannot fork).
"""

from __future__ import annotations

import json
import os
import shlex
import subprocess
import sys
import tempfile
from pathlib import Path

import warm as zygotes
from warm import ROOT, RUNTIME_ENV, enabled

#: a script that writes its process's environment to ``<folder>/<RANK>.json``
DUMP = "import json, os, sys\njson.dump(dict(os.environ), open(os.path.join(sys.argv[1], os.environ.get('RANK', '0') + '.json'), 'w'))\n"

#: per launch options and test environment: (the launcher's environment, each process's environment)
_LEARNED: dict[tuple, tuple[dict[str, str], list[dict[str, str]]]] = {}


def _without_port(options: list[str]) -> tuple[list[str], str | None]:
    """The launch options without ``--main_process_port N``, and N."""
    if "--main_process_port" not in options:
        return list(options), None
    at = options.index("--main_process_port")
    return options[:at] + options[at + 2:], options[at + 1]


def _learn(launcher: list[str], options: list[str], env: dict[str, str]) -> tuple[dict[str, str], list[dict[str, str]]]:
    """Each process's environment under a real ``<launcher> <options>`` started with ``env``."""
    from helpers import free_port

    plain, _ = _without_port(options)
    key = (tuple(launcher), tuple(plain), tuple(sorted((k, v) for k, v in env.items() if k not in RUNTIME_ENV)))
    if key not in _LEARNED:
        with tempfile.TemporaryDirectory(prefix="dit-lora-launch-env-") as tmp:
            script = Path(tmp) / "dump_env.py"
            script.write_text(DUMP)
            cmd = [*launcher, *plain, "--main_process_port", str(free_port()), str(script), tmp]
            done = subprocess.run(cmd, capture_output=True, text=True, env=env, cwd=ROOT, timeout=120)
            assert done.returncode == 0, done.stdout + done.stderr
            ranks = sorted(Path(tmp).glob("*.json"), key=lambda p: int(p.stem))
            _LEARNED[key] = (dict(env), [json.loads(p.read_text()) for p in ranks])
    return _LEARNED[key]


def _process_env(env: dict[str, str], learned: tuple[dict[str, str], dict[str, str]], port: str,
                 options: list[str]) -> dict[str, str]:
    """``env`` with what the launch added or changed for one process, the per-run values rewritten."""
    launcher_env, process_env = learned
    out = {k: v for k, v in env.items() if k not in launcher_env or k in process_env}
    out.update({k: v for k, v in process_env.items() if launcher_env.get(k) != v})
    if "MASTER_PORT" in out:
        out["MASTER_PORT"] = port
        out["TORCHELASTIC_USE_AGENT_STORE"] = "False"  # no agent: rank 0 hosts the rendezvous store
    out.pop("TORCHELASTIC_ERROR_FILE", None)  # the learning launch's folder, gone
    if "DIT_LORA_LAUNCHED_COMMAND" in out:
        out["DIT_LORA_LAUNCHED_COMMAND"] = shlex.join(["dit-lora", "launch", *options])
    return out


def _exit_code(returncode: int) -> int:
    return 128 - returncode if returncode < 0 else returncode


def _launch_code(codes: list[int]) -> int:
    """``dit-lora launch``'s code for its processes' codes (commands/launch.py ``_torchrun``): a process's own failure
    first, then one the agent stopped."""
    failed = [_exit_code(c) for c in codes if c != 0]
    own = [c for c in failed if c < 128]
    return (own or failed or [0])[0]


#: the launchers a test may name: dit-lora's, and accelerate's own (``accelerate launch``, as many users start runs)
LAUNCHERS = {"dit-lora": [sys.executable, "-m", "dit_lora.commands.cli", "launch"],
             "accelerate": [sys.executable, "-m", "accelerate.commands.launch"]}


def launch(options: list[str], script: Path | str, args: list[str], *, env: dict[str, str] | None = None,
           timeout: float = 400, warm: bool = True, via: str = "dit-lora") -> subprocess.CompletedProcess:
    """``dit-lora launch <options> <script> <args>`` (``via="accelerate"``: ``accelerate launch``) with its output
    captured (text): forked from a zygote when ``warm`` and the pool allows it, else the real launcher. ``env`` is
    added to this process's environment."""
    from helpers import free_port

    from dit_lora.commands.launch import FAILURE_TIMEOUT_S

    full_env = {**os.environ, "PYTHONUNBUFFERED": "1", **(env or {})}
    options = [str(o) for o in options]
    argv = [str(script), *map(str, args)]
    if warm and enabled():
        plain, port = _without_port(options)
        launcher_env, processes = _learn(LAUNCHERS[via], options, full_env)
        port = port or str(free_port())
        with_port = [*plain, "--main_process_port", port]
        runs = [(argv, _process_env(full_env, (launcher_env, p), port, with_port)) for p in processes]
        done = zygotes.POOL.run_group(runs, full_env, ROOT, timeout, FAILURE_TIMEOUT_S)
        if done is not None:
            return subprocess.CompletedProcess(
                [*LAUNCHERS[via], *with_port, *argv], _launch_code([d.returncode for d in done]),
                "".join(d.stdout for d in done), "".join(d.stderr for d in done))
    if "--main_process_port" not in options:  # tests run in parallel: never the default port
        options = [*options, "--main_process_port", str(free_port())]
    cmd = [*LAUNCHERS[via], *options, *argv]
    return subprocess.run(cmd, capture_output=True, text=True, env=full_env, cwd=ROOT, timeout=timeout)


def split_launcher(launcher: list[str]) -> tuple[str, list[str]]:
    """``(via, options)`` of a launcher command line as the tests write it (``[python, -m, <launcher module>, ...]``)."""
    for via, prefix in LAUNCHERS.items():
        if [str(w) for w in launcher[1:len(prefix)]] == prefix[1:]:
            return via, [str(w) for w in launcher[len(prefix):]]
    raise ValueError(f"not a launcher warm_launch knows: {launcher}")
