"""``dit-lora launch``: ``accelerate launch`` that keeps the run's signals and exit codes.

``dit-lora launch [accelerate launch options] recipes/X_lora.py [recipe options]`` (or ``... -m dit_lora train
[options]``, the installed package's entry point) takes exactly
``accelerate launch``'s options (its own parser and launchers, run in this process) and differs in what
plain ``accelerate launch`` loses:

* **exit codes**: the launcher exits with the training process's code (2 for a user error, 3 for an
  unrecoverable run, 143 / 130 for a run stopped by a signal) and adds no traceback or echoed command line
  (accelerate raises ``CalledProcessError``, torchrun ``ChildFailedError``; both end in exit 1);
* **signals**: SIGTERM / SIGINT / SIGHUP to the launcher are forwarded to the training process(es) and the
  launcher waits for them to save a checkpoint and exit (plain ``accelerate launch`` dies at once and leaves
  the training process running; torchrun's agent forwards and waits up to its shutdown timeout,
  ``TORCH_ELASTIC_SHUTDOWN_TIMEOUT``, 30 s by default, which ``dit-lora launch`` raises to
  :data:`STOP_TIMEOUT_S` unless the user set it, and applies itself where torch does not read it, before 2.12;
  the launcher then exits with the processes' own codes). A signal the launcher was started with ignored (SIGHUP
  under ``nohup``) stays ignored, in the launcher and in the training processes;
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
from collections.abc import Sequence

from dit_lora.core.errors import UserError
from dit_lora.training.launch_precision import LAUNCH_PRECISION_VAR, check_launch_precision
from dit_lora.training.signals import LAUNCHED_VAR

#: signals the launcher forwards to the training process instead of dying (unless started with one ignored)
FORWARDED = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)
#: torch's variable for how long its agent waits for the processes to exit after a signal, then SIGKILLs them
SHUTDOWN_TIMEOUT_VAR = "TORCH_ELASTIC_SHUTDOWN_TIMEOUT"
#: our default for it: a stop's checkpoint save must never be cut short by the launcher (a scheduler's own
#: SIGKILL still bounds it); torch's 30 s would kill a large model's save half-way
STOP_TIMEOUT_S = 4 * 3600
#: torch's own default, kept for the agent's shutdown after a process failed (no stop requested): the other
#: processes may wait in a collective for the one that died, and the launcher should report the failure soon
FAILURE_TIMEOUT_S = 30


def launch_precision(options: Sequence[str]) -> str | None:
    """The ``--mixed_precision`` value among the launch options (before the script), None when not given."""
    for i, arg in enumerate(options):
        if arg == "--mixed_precision" and i + 1 < len(options):
            return options[i + 1]
        if arg.startswith("--mixed_precision="):
            return arg.split("=", 1)[1]
    return None


def _exit_code(returncode: int) -> int:
    """A child's return code as a shell reports it: a death by signal N is 128 + N."""
    return 128 - returncode if returncode < 0 else returncode


def _say(text: str) -> None:
    print(f"dit-lora launch: {text}", file=sys.stderr, flush=True)


def _launch_options(argv: list[str], script: str) -> list[str]:
    """The launch options of ``argv`` (everything before the training script)."""
    return argv[: argv.index(script)] if script in argv else []


def run_process(cmd: list[str], env: dict[str, str]) -> int:
    """Start the training process, forward stop signals to it, wait for it; returns its exit code."""
    proc = subprocess.Popen(cmd, env=env)  # before our handlers: the child inherits an ignored signal as ignored
    told: list[int] = []

    def forward(signum, frame):
        if proc.poll() is None:
            if not told:
                _say(
                    f"received {signal.Signals(signum).name}: passed to the training process (pid {proc.pid}); "
                    "waiting for it to save a checkpoint and exit"
                )
            told.append(signum)
            proc.send_signal(signum)

    # A signal this launcher was started with ignored (SIGHUP under nohup) stays ignored here and in the child.
    previous = {sig: signal.signal(sig, forward) for sig in FORWARDED if signal.getsignal(sig) != signal.SIG_IGN}
    try:
        returncode = proc.wait()  # PEP 475: a handled signal does not interrupt the wait
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
    if returncode < 0:
        _say(
            f"the training process was killed by {signal.Signals(-returncode).name} (exit {_exit_code(returncode)})"
            + ("" if -returncode in FORWARDED else "; out of memory is a common cause of SIGKILL")
        )
    return _exit_code(returncode)


def _torchrun(args, failure_timeout: int | None = FAILURE_TIMEOUT_S) -> int:
    """Several processes (``--multi_gpu``): accelerate's torchrun launcher, its failures as exit codes.

    ``failure_timeout`` bounds the agent's wait for the processes after a failure (None: the agent's own timeout,
    as when the user set :data:`SHUTDOWN_TIMEOUT_VAR`); a stop signal gets the agent's whole timeout.
    """
    from accelerate.commands.launch import multi_gpu_launcher
    from torch.distributed.elastic.multiprocessing import SignalException
    from torch.distributed.elastic.multiprocessing.errors import ChildFailedError

    contexts: list = []
    try:
        with _AgentWatch(contexts, failure_timeout):
            multi_gpu_launcher(args)
    except ChildFailedError as err:
        codes = [_exit_code(f.exitcode) for f in err.failures.values()]
        # A process that exited by itself explains the failure; ones the agent then stopped show its signal.
        own = [c for c in codes if c < 128]
        return (own or codes or [1])[0]
    except SignalException as err:
        # The agent has forwarded the signal to every process and waited for them (SHUTDOWN_TIMEOUT_VAR).
        return _stopped_code(int(err.sigval), _worker_codes(contexts))
    return 0


def _stopped_code(sigval: int, codes: list[int] | None) -> int:
    """The launcher's code after a stop signal: the processes' own codes, a failure first (2 from a full disk
    during the stop's save, 137 from a kill), else the stop's 128 + N, or 0 when all finished. Without the codes
    (another torch version keeps its processes elsewhere), 128 + N."""
    stopped = 128 + sigval
    if not codes:
        return stopped
    failed = [c for c in codes if c not in (0, stopped)]
    return (failed or [c for c in codes if c == stopped] or [0])[0]


def _worker_codes(contexts: list) -> list[int] | None:
    """The exit codes (shell style) of the processes the agent closed, in rank order; None when unknown."""
    codes = []
    for context in contexts:
        for _rank, handler in sorted(getattr(context, "subprocess_handlers", {}).items()):
            returncode = handler.proc.poll()
            if returncode is None:  # still running (the agent gave up on it): nothing to report
                return None
            codes.append(_exit_code(returncode))
    return codes or None


def _stop_timeout_s(default: int = 30) -> int:
    """The agent's wait after a stop signal: :data:`SHUTDOWN_TIMEOUT_VAR`, else ``default``."""
    try:
        return int(os.environ.get(SHUTDOWN_TIMEOUT_VAR, default))
    except ValueError:
        return default


class _AgentWatch:
    """While torchrun's agent runs: keep the process groups it closes (for their exit codes), bound its wait after
    a failure to ``failure_timeout``, and put the agent's log lines on a stop in our words."""

    def __init__(self, contexts: list, failure_timeout: int | None) -> None:
        self.contexts, self.failure_timeout = contexts, failure_timeout
        self.stopping = self.told_kill = False

    def __enter__(self) -> _AgentWatch:
        import logging

        from torch.distributed.elastic.multiprocessing import api

        self.api, self.original = api, api.PContext.close
        watch = self

        def close(pcontext, death_sig=None, timeout=30):
            # The agent closes its processes inside ``except SignalException`` for a stop, otherwise after a failure
            # or at the end; only a stop gets the long wait.
            watch.stopping = isinstance(sys.exc_info()[1], api.SignalException)
            if watch.stopping:  # the variable's wait, also where torch ignores it (before 2.12: always 30 s)
                timeout = _stop_timeout_s(timeout)
            elif watch.failure_timeout is not None:
                timeout = min(timeout, watch.failure_timeout)
            if pcontext not in watch.contexts:
                watch.contexts.append(pcontext)
            return watch.original(pcontext, death_sig, timeout)

        # Patching torch's class for the agent's lifetime is the point (restored in __exit__)
        api.PContext.close = close  # type: ignore[method-assign]
        self.loggers = [
            logging.getLogger(name)
            for name in ("torch.distributed.elastic.agent.server.api", "torch.distributed.elastic.multiprocessing.api")
        ]
        for logger in self.loggers:
            logger.addFilter(self.filter)
        return self

    def __exit__(self, *exc) -> None:
        self.api.PContext.close = self.original  # type: ignore[method-assign]  # torch's own method back
        for logger in self.loggers:
            logger.removeFilter(self.filter)

    def filter(self, record) -> bool:
        """A logging filter: the agent's warnings on a stop become one line of ours; other records pass."""
        text = str(record.msg)
        if text.startswith("Received %s death signal"):
            name = signal.Signals(int(record.args[0])).name
            _say(
                f"received {name}: passed to the training processes; waiting for them to save a checkpoint and "
                f"exit (up to {_stop_timeout_s()} s, {SHUTDOWN_TIMEOUT_VAR})"
            )
            return False
        if text.startswith("Unable to shutdown process") and self.stopping:
            if not self.told_kill:
                self.told_kill = True
                _say(
                    f"the training processes did not exit within {_stop_timeout_s()} s of the stop and are killed "
                    f"(SIGKILL, exit 137); the last whole checkpoint stays. To give the save more time, raise "
                    f"{SHUTDOWN_TIMEOUT_VAR} (seconds)."
                )
            return False
        return not text.startswith("Sending process %s closing signal")


#: the training script's help flags: ``dit-lora launch recipes/X_lora.py --help`` shows the script's options
HELP_FLAGS = ("-h", "--help")


def script_help(args) -> int | None:
    """The training script's own help page when its arguments ask for it (``recipes/X_lora.py --help`` or
    ``-m dit_lora train -h``), run in this process: its exit code. None when they do not ask for it (or with
    ``--no_python``). Accelerate's launcher would first warn about every launch default it fills in and start a
    process only to print a page, so the user would read accelerate's notes before dit-lora's options."""
    if getattr(args, "no_python", False) or not set(HELP_FLAGS) & set(args.training_script_args or ()):
        return None
    import runpy

    saved = sys.argv
    sys.argv = [args.training_script, *args.training_script_args]
    try:
        if getattr(args, "module", False):
            runpy.run_module(args.training_script, run_name="__main__", alter_sys=True)
        else:
            runpy.run_path(args.training_script, run_name="__main__")
    except SystemExit as stop:  # argparse's help exits 0; a script's own error keeps its code
        return stop.code if isinstance(stop.code, int) else (0 if stop.code is None else 1)
    finally:
        sys.argv = saved
    return 0


def main(argv: Sequence[str]) -> int:
    """``dit-lora launch ...``: returns the training process's exit code."""
    from accelerate.commands.launch import (
        _validate_launch_command,
        launch_command_parser,
        prepare_simple_launcher_cmd_env,
    )

    argv = list(argv)
    parser = launch_command_parser()
    parser.prog = "dit-lora launch"
    parser.usage = (
        "dit-lora launch [accelerate launch options] recipes/<family>_lora.py [recipe options]\n"
        "       dit-lora launch [accelerate launch options] -m dit_lora train [recipe options]"
    )
    args = parser.parse_args(argv)
    shown = script_help(args)
    if shown is not None:
        return shown
    args, _defaults, _mp = _validate_launch_command(args)
    options = _launch_options(argv, args.training_script)
    os.environ[LAUNCHED_VAR] = "1"  # inherited by the training processes, through torchrun too
    os.environ[LAUNCHED_VAR + "_COMMAND"] = shlex.join(["dit-lora", "launch", *options])
    precision = launch_precision(options)
    if precision is None:
        os.environ.pop(LAUNCH_PRECISION_VAR, None)  # an outer launch's value is not this one's
    else:
        os.environ[LAUNCH_PRECISION_VAR] = precision
    if getattr(args, "tpu", False) or getattr(args, "use_deepspeed", False) and not args.cpu:
        raise UserError(
            "dit-lora launch starts local processes (one, or several with --multi_gpu); TPU and "
            "DeepSpeed launches are not supported (dit-lora trains with DDP, or FSDP2 with --config_file "
            "accelerate_configs/fsdp2.yaml). Drop --tpu/--use_deepspeed, or use `accelerate launch` for them."
        )
    if not args.cpu and (args.multi_gpu or args.use_fsdp or args.use_megatron_lm):
        user_timeout = SHUTDOWN_TIMEOUT_VAR in os.environ
        os.environ.setdefault(SHUTDOWN_TIMEOUT_VAR, str(STOP_TIMEOUT_S))  # read by torch's LaunchConfig
        if signal.getsignal(signal.SIGHUP) == signal.SIG_IGN:  # nohup: the agent must not take SIGHUP over
            os.environ.setdefault("PET_SIGNALS_TO_HANDLE", "SIGTERM,SIGINT,SIGQUIT")  # torchrun's --signals_to_handle
        return _torchrun(args, failure_timeout=None if user_timeout else FAILURE_TIMEOUT_S)
    cmd, env = prepare_simple_launcher_cmd_env(args)
    return run_process(cmd, env)


__all__ = [
    "FORWARDED",
    "HELP_FLAGS",
    "LAUNCH_PRECISION_VAR",
    "SHUTDOWN_TIMEOUT_VAR",
    "STOP_TIMEOUT_S",
    "check_launch_precision",
    "launch_precision",
    "main",
    "run_process",
    "script_help",
]
