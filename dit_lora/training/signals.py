"""Preemption: SIGTERM, SIGINT and SIGHUP finish the current update, save a checkpoint, say how to resume, and exit.

What SLURM, Kubernetes and spot instances send before killing a job is SIGTERM; Ctrl-C is SIGINT; a closed
terminal or SSH session sends SIGHUP. SIGHUP is left alone when the process started with it ignored (``nohup``):
such a run keeps running when its terminal closes. A run handles them in three phases (:class:`StopSignals`):

* **setup** (loading, caching; no step has run, nothing to save): the handler raises
  :class:`~dit_lora.core.errors.Interrupted` at once: one line (from the main process only), exit 143 (SIGTERM),
  130 (SIGINT) or 129 (SIGHUP);
* **training**: the handler only sets a flag (no device work, no host sync). The loop asks
  :meth:`StopSignals.should_stop` after each optimizer update, so the update in flight (all its
  micro-batches), a checkpoint save and a validation in progress all complete; then the run saves
  ``checkpoint-<step>`` (the same atomic save as a scheduled one), prints the command that resumes it and
  exits 143 / 130 / 129. Resumed, it is bitwise the run that was never stopped;
* **finishing** (after the last step: adapter, samples, card): the first signal is noted and the run ends
  normally; once ``train`` has returned or raised (**ended**), a first signal is noted quietly: the process is
  exiting with its own code.

A second signal stops the process at once (one line; the last whole checkpoint stays, as after a SIGKILL).
Repeats within :data:`REPEAT_WINDOW_S` of the first count as the same request: a scheduler may signal every
process of a job and a launcher forwards what it received, so one stop often arrives twice.

Several processes agree on the step to stop at without any per-step device->host sync: after each update
every rank starts a one-integer ``MAX`` all-reduce of its flag on a CPU (gloo) group and waits for it after
the *next* update, so the reduction runs while that update computes. All ranks read the same reduced value
after the same update, so they stop together (one update later than a single process would) and save one
checkpoint together, whichever ranks were signalled.

A training process started by a launcher (``accelerate launch``, torchrun, ``dit-lora launch``) must not
outlive it: on Linux ``prctl(PR_SET_PDEATHSIG, SIGTERM)`` makes the launcher's death a SIGTERM (the same
save-and-exit), elsewhere a thread notices the parent changed. A plain ``python recipe.py`` from a shell
gets neither, so ``nohup`` or a closed terminal does not stop it.
"""

from __future__ import annotations

import atexit
import ctypes
import os
import shlex
import signal
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from types import FrameType
from typing import TYPE_CHECKING, Any

from dit_lora.core.errors import Interrupted

if TYPE_CHECKING:  # torch loads only when several processes need the agreement
    import torch
    import torch.distributed as dist

#: exit code of a run stopped by each signal: the shell's 128 + signal number, which schedulers and
#: ``set -e`` scripts read as "terminated", distinct from 2 (user error) and 3 (unrecoverable run)
EXIT_CODES: dict[int, int] = {signal.SIGTERM: 143, signal.SIGINT: 130, signal.SIGHUP: 129}
#: handled only when not ignored at install: a run started with ``nohup`` must keep ignoring SIGHUP
_UNLESS_IGNORED = (signal.SIGHUP,)
#: repeats of the stop signal this soon after the first are the same request (forwarded or broadcast)
REPEAT_WINDOW_S = 2.0
#: set by ``dit-lora launch`` in the training processes' environment
LAUNCHED_VAR = "DIT_LORA_LAUNCHED"
_PR_SET_PDEATHSIG = 1
_LAUNCHER_WORDS = ("accelerate", "torchrun", "torch.distributed.run", "dit-lora", "dit_lora.commands.launch")

_current: StopSignals | None = None
# what signal.signal takes and returns: a function, SIG_DFL / SIG_IGN, or None (not installed from Python)
_Handler = Callable[[int, FrameType | None], Any] | int | None
_LAUNCHED: dict[str, str | None] = {}  # "by": how watch_launcher tied this process to its launcher (read at start:
# once the launcher is gone, the parent is someone else)


def _say(text: str) -> None:
    """One line on stderr, written directly: a handler may interrupt a ``print`` to the same stream."""
    try:
        os.write(2, (text.rstrip("\n") + "\n").encode())
    except OSError:
        pass


def signal_name(signum: int) -> str:
    """``SIGTERM`` for 15."""
    return signal.Signals(signum).name


class StopSignals:
    """The SIGTERM/SIGINT/SIGHUP handlers of one training process and the stop flag they set (see the module doc)."""

    def __init__(self) -> None:
        self.signum: int | None = None  # the first stop signal received
        self.first_at = 0.0
        self.phase = "setup"
        # Until start_training knows: the launcher's rank variables, so only one process speaks during setup.
        self.main_process = os.environ.get("RANK", os.environ.get("LOCAL_RANK", "0")) == "0"
        self.output_dir: Path | None = None
        self._previous: dict[int, _Handler] = {}
        self._group: dist.ProcessGroup | None = None  # the CPU group of the agreement (several processes only)
        # (work, buffer) of the all-reduce started after the last update
        self._pending: tuple[dist.Work, torch.Tensor] | None = None
        self.agreed = False

    # ---- handlers -------------------------------------------------------------------------------
    def install(self) -> None:
        """Take over SIGTERM, SIGINT and SIGHUP, SIGHUP only when not ignored (main thread only; elsewhere signals
        cannot be handled)."""
        if threading.current_thread() is not threading.main_thread():
            return
        for signum in EXIT_CODES:
            if signum in _UNLESS_IGNORED and signal.getsignal(signum) == signal.SIG_IGN:
                continue
            self._previous[signum] = signal.signal(signum, self._handle)

    def uninstall(self) -> None:
        """Give the handlers back (an in-process ``train`` must leave its caller's handlers as they were)."""
        for signum, handler in self._previous.items():
            signal.signal(signum, handler)
        self._previous.clear()

    @property
    def exit_code(self) -> int:
        """The exit code for the first stop signal received: 143 (SIGTERM, and when none was), 130, 129."""
        return EXIT_CODES.get(self.signum, 143) if self.signum is not None else 143

    def end(self) -> None:
        """``train`` has returned or raised while these handlers stay (installed by the recipe for the whole
        process): a first signal from now on is noted, not raised, as the process is exiting with its own code."""
        self.phase = "ended"

    def _handle(self, signum: int, frame: FrameType | None) -> None:
        now = time.monotonic()
        if self.signum is None:
            self.signum, self.first_at = signum, now
            if self.phase == "setup":
                raise Interrupted(
                    f"received {signal_name(signum)} while setting up (before the first step: nothing to "
                    f"save); stopped (exit {self.exit_code})."
                    if self.main_process
                    else "",
                    self.exit_code,
                )
            if self.main_process and self.phase != "ended":
                what = (
                    "finishing the current update, then saving a checkpoint"
                    if self.phase == "training"
                    else "finishing the run (adapter and summary)"
                )
                _say(
                    f"received {signal_name(signum)}: {what}; send it again to stop at once (the last whole "
                    "checkpoint stays)."
                )
            return
        if now - self.first_at < REPEAT_WINDOW_S:
            return  # the same stop, delivered twice (a launcher forwarding it, a scheduler signalling every process)
        where = f" in {self.output_dir}" if self.output_dir is not None else ""
        _say(
            f"received {signal_name(signum)} again: stopped at once, without saving; the last whole checkpoint{where} "
            f"stays (exit {EXIT_CODES.get(signum, 143)})."
        )
        for stream in (sys.stdout, sys.stderr):
            try:
                stream.flush()
            except Exception:
                pass
        os._exit(EXIT_CODES.get(signum, 143))

    # ---- the loop's questions -------------------------------------------------------------------
    def start_training(self, accelerator, output_dir: Path) -> None:
        """Setup is over: from now on a signal only sets the flag. Several processes get their CPU group here
        (a collective call: every rank makes it, in the same order)."""
        self.main_process = accelerator.is_main_process
        self.output_dir = Path(output_dir)
        if accelerator.num_processes <= 1:
            self.phase = "training"  # a signal that arrived during setup has already stopped the run
            return
        import torch.distributed as dist

        # The phase changes before new_group, which is a barrier: once any rank leaves it, every rank only sets
        # the flag, so no rank trains while another could still stop in setup without saving. (A rank stopped in
        # setup before reaching here leaves the others waiting in this barrier until the launcher ends them.)
        self.phase = "training"
        self._group = dist.new_group(backend="gloo")

    @property
    def distributed(self) -> bool:
        """Whether several processes take part in the stop agreement (the CPU group exists)."""
        return self._group is not None

    def should_stop(self) -> bool:
        """Whether every process stops after the update that just ended (called once per update, on every rank).

        One process: its own flag. Several: the reduction started after the previous update (see the module
        doc); a host-side wait on a CPU collective, never a device sync.
        """
        if self._group is None:
            self.agreed = self.signum is not None
            return self.agreed
        if self._pending is not None:
            self.agreed = self._wait()
            if self.agreed:
                return True
        import torch
        import torch.distributed as dist

        buffer = torch.tensor([0 if self.signum is None else 1], dtype=torch.int32)
        work = dist.all_reduce(buffer, op=dist.ReduceOp.MAX, group=self._group, async_op=True)
        self._pending = (work, buffer)
        return False

    def _wait(self) -> bool:
        assert self._pending is not None  # both callers wait only for a reduction in flight
        work, buffer = self._pending
        self._pending = None
        work.wait()
        return bool(buffer.item())  # a CPU tensor: no device involved

    def finish_training(self) -> bool:
        """The loop ended: settle the last reduction (every rank has one in flight); True when all stop now."""
        if self._pending is not None:
            self.agreed = self._wait() or self.agreed
        elif self._group is None:
            self.agreed = self.signum is not None
        self.phase = "finishing"
        return self.agreed


def current() -> StopSignals:
    """This process's :class:`StopSignals`, installed on first use."""
    global _current
    if _current is None:
        _current = StopSignals()
        _current.install()
        watch_launcher()
        atexit.register(exiting)  # once per process: release() leaves nothing for it to do
    return _current


def installed() -> bool:
    """Whether this process's handlers are installed (by the recipe's entry point, or by a ``train`` under way)."""
    return _current is not None


def release() -> None:
    """Uninstall the handlers (the end of an in-process run)."""
    global _current
    if _current is not None:
        _current.uninstall()
        _current = None


def exiting() -> None:
    """The last ``atexit`` callback of a process whose handlers are installed (:func:`current` registers it first, so
    it runs after every other: a tracker's upload there can still be stopped by a second signal): the stop signals
    this module handles are ignored from here on. Python's finalization then resets a handler it installed to the
    default (``_PySignal_Fini``; an ignored signal stays ignored), so a Ctrl-C in that last teardown killed the process
    by SIGINT, and the launcher said "killed by SIGINT (exit 130)" of a run whose summary said completed."""
    if _current is None or threading.current_thread() is not threading.main_thread():
        return
    for signum in _current._previous:
        signal.signal(signum, signal.SIG_IGN)


def rerun_command() -> str:
    """This run's command line with ``--resume_from_checkpoint latest`` in place of any resume flag, started the way
    this run was (``dit-lora launch`` with its options, ``accelerate launch``, ``python``, or ``dit-lora train``;
    ``python -m dit_lora`` stays a module run)."""
    argv, skip = [], False
    for arg in sys.argv[1:]:
        if skip:
            skip = False
            continue
        if arg == "--resume_from_checkpoint":
            skip = True
            continue
        if not arg.startswith("--resume_from_checkpoint="):
            argv.append(arg)
    launched = _LAUNCHED["by"] is not None if "by" in _LAUNCHED else _launched()
    launcher = os.environ.get(LAUNCHED_VAR + "_COMMAND") or (
        "accelerate launch [your launch options]" if launched else "python"
    )
    main = Path(sys.argv[0]) if sys.argv and sys.argv[0] else None
    if main is not None and main.name == "dit-lora" and not launched:  # the console script: `dit-lora train ...`
        return shlex.join(["dit-lora", *argv, "--resume_from_checkpoint", "latest"])
    if main is not None and main.name == "__main__.py" and main.parent.name == "dit_lora":  # python -m dit_lora
        module = {"-m", "--module"} & set(shlex.split(launcher))  # `dit-lora launch -m` names the module next
        script = ["dit_lora"] if module else ["-m", "dit_lora"]
    else:
        script = [os.path.relpath(main) if main is not None else "recipes/<family>_lora.py"]
    return f"{launcher} {shlex.join([*script, *argv, '--resume_from_checkpoint', 'latest'])}"


def resume_command(output_dir: Path, step: int) -> str:
    """How to resume from ``checkpoint-<step>``: :func:`rerun_command`, on a line of its own to paste."""
    return (
        f"Resume with the same command plus --resume_from_checkpoint latest (or "
        f"{Path(output_dir) / f'checkpoint-{step}'}):\n  {rerun_command()}"
    )


# ---- the launcher's lifetime bounds the training process's -------------------------------------
def _parent_cmdline() -> str:
    try:
        return Path(f"/proc/{os.getppid()}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return ""


def _launched() -> bool:
    """Started by a launcher (``dit-lora launch``, torchrun, ``accelerate launch``), not from a shell."""
    if os.environ.get(LAUNCHED_VAR) == "1" or os.environ.get("TORCHELASTIC_RUN_ID"):
        return True
    if os.environ.get("ACCELERATE_MIXED_PRECISION") is None:  # set by every accelerate launch
        return False
    parent = _parent_cmdline()
    return any(word in parent for word in _LAUNCHER_WORDS)


def watch_launcher() -> str | None:
    """Under a launcher, make its death a SIGTERM to this process; returns how (None when not launched)."""
    if "by" in _LAUNCHED:
        return _LAUNCHED["by"]
    _LAUNCHED["by"] = _tie_to_launcher() if _launched() else None
    return _LAUNCHED["by"]


def _tie_to_launcher() -> str:
    parent = os.getppid()
    if sys.platform.startswith("linux"):
        try:
            libc = ctypes.CDLL(None, use_errno=True)
            if libc.prctl(_PR_SET_PDEATHSIG, int(signal.SIGTERM), 0, 0, 0) == 0:
                if os.getppid() != parent:  # died before prctl took effect
                    os.kill(os.getpid(), signal.SIGTERM)
                return "prctl"
        except (OSError, AttributeError):
            pass
    threading.Thread(target=_poll_parent, args=(parent,), name="dit-lora-parent-watch", daemon=True).start()
    return "poll"


def _poll_parent(parent: int, interval: float = 0.5) -> None:
    """Portable fallback: a changed parent pid means the launcher died (its children are re-parented)."""
    while os.getppid() == parent:
        time.sleep(interval)
    os.kill(os.getpid(), signal.SIGTERM)


__all__ = [
    "EXIT_CODES",
    "LAUNCHED_VAR",
    "REPEAT_WINDOW_S",
    "StopSignals",
    "exiting",
    "current",
    "installed",
    "release",
    "rerun_command",
    "resume_command",
    "signal_name",
    "watch_launcher",
]
