"""``dit-lora launch``: ``accelerate launch`` that keeps the run's signals and exit codes.

``dit-lora launch [accelerate launch options] recipes/X_lora.py [recipe options]`` takes exactly
``accelerate launch``'s options (its own parser and launchers, run in this process) and differs in what
plain ``accelerate launch`` loses:

* **exit codes**: the launcher exits with the training process's code (2 for a user error, 3 for an
  unrecoverable run, 143 / 130 for a run stopped by a signal) and adds no traceback or echoed command line
  (accelerate raises ``CalledProcessError``, torchrun ``ChildFailedError``; both end in exit 1);
* **signals**: SIGTERM / SIGINT / SIGHUP to the launcher are forwarded to the training process(es) and the
  launcher waits for them to save a checkpoint and exit (plain ``accelerate launch`` dies at once and leaves
  the training process running; torchrun's agent forwards and waits up to its shutdown timeout, 30 s);
* the training processes know they were launched (:data:`~.training.signals.LAUNCHED_VAR`), so they stop
  when the launcher dies however it died (``PR_SET_PDEATHSIG``), and print a resume command that starts
  with ``dit-lora launch`` and the same launch options.
"""

from __future__ import annotations

import os
import shlex
import signal
import subprocess
import sys
from typing import Sequence

from .errors import UserError

#: signals the launcher forwards to the training process instead of dying
FORWARDED = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)


def _exit_code(returncode: int) -> int:
    """A child's return code as a shell reports it: a death by signal N is 128 + N."""
    return 128 - returncode if returncode < 0 else returncode


def _say(text: str) -> None:
    print(f"dit-lora launch: {text}", file=sys.stderr, flush=True)


def _launch_options(argv: list[str], script: str) -> list[str]:
    """The launch options of ``argv`` (everything before the training script)."""
    return argv[:argv.index(script)] if script in argv else []


def run_process(cmd: list[str], env: dict[str, str]) -> int:
    """Start the training process, forward stop signals to it, wait for it; returns its exit code."""
    proc = subprocess.Popen(cmd, env=env)
    told: list[int] = []

    def forward(signum, frame):
        if proc.poll() is None:
            if not told:
                _say(f"received {signal.Signals(signum).name}: passed to the training process (pid {proc.pid}); "
                     "waiting for it to save a checkpoint and exit")
            told.append(signum)
            proc.send_signal(signum)

    previous = {sig: signal.signal(sig, forward) for sig in FORWARDED}
    try:
        returncode = proc.wait()  # PEP 475: a handled signal does not interrupt the wait
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
    if returncode < 0:
        _say(f"the training process was killed by {signal.Signals(-returncode).name} (exit {_exit_code(returncode)})"
             + ("" if -returncode in FORWARDED else "; out of memory is a common cause of SIGKILL"))
    return _exit_code(returncode)


def _torchrun(args) -> int:
    """Several processes (``--multi_gpu``): accelerate's torchrun launcher, its failures as exit codes."""
    from accelerate.commands.launch import multi_gpu_launcher
    from torch.distributed.elastic.multiprocessing import SignalException
    from torch.distributed.elastic.multiprocessing.errors import ChildFailedError

    try:
        multi_gpu_launcher(args)
    except ChildFailedError as err:
        codes = [_exit_code(f.exitcode) for f in err.failures.values()]
        # A process that exited by itself explains the failure; ones the agent then stopped show its signal.
        own = [c for c in codes if c < 128]
        return (own or codes or [1])[0]
    except SignalException as err:
        # The agent has forwarded the signal to every process and waited for them (--shutdown_timeout).
        return 128 + int(err.sigval)
    return 0


def main(argv: Sequence[str]) -> int:
    """``dit-lora launch ...``: returns the training process's exit code."""
    from accelerate.commands.launch import (_validate_launch_command, launch_command_parser,
                                            prepare_simple_launcher_cmd_env)

    from .training.signals import LAUNCHED_VAR

    argv = list(argv)
    parser = launch_command_parser()
    parser.prog = "dit-lora launch"
    parser.usage = "dit-lora launch [accelerate launch options] recipes/<family>_lora.py [recipe options]"
    args = parser.parse_args(argv)
    args, _defaults, _mp = _validate_launch_command(args)
    options = _launch_options(argv, args.training_script)
    os.environ[LAUNCHED_VAR] = "1"  # inherited by the training processes, through torchrun too
    os.environ[LAUNCHED_VAR + "_COMMAND"] = shlex.join(["dit-lora", "launch", *options])
    if getattr(args, "tpu", False) or getattr(args, "use_deepspeed", False) and not args.cpu:
        raise UserError("dit-lora launch starts local processes (one, or several with --multi_gpu); TPU and "
                        "DeepSpeed launches are not supported (dit-lora trains with DDP). Drop --tpu/--use_deepspeed, "
                        "or use `accelerate launch` for them.")
    if not args.cpu and (args.multi_gpu or args.use_fsdp or args.use_megatron_lm):
        return _torchrun(args)
    cmd, env = prepare_simple_launcher_cmd_env(args)
    return run_process(cmd, env)


__all__ = ["FORWARDED", "main", "run_process"]
