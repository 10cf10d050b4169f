"""One run per output folder: an advisory lock held for the run's lifetime.

Two runs writing one ``--output_dir`` replace each other's adapter and trip over each other's checkpoints. The main
process takes ``fcntl.flock`` on ``<output_dir>/.dit-lora.lock`` (the other ranks take nothing, and learn the outcome
by a broadcast, so none waits on a collective the main process never reaches). The kernel releases the lock when the
process exits, however it exits: a SIGKILLed or OOM-killed run leaves the file behind but never a held lock, so no
stale-lock cleanup is needed and none is attempted (the file's content is only the holder's description).

File systems: on a local disk the lock is exact. On NFS, Linux emulates ``flock`` with byte-range locks that the
server arbitrates (NFSv4, or NFSv3 with the lock manager), so runs on two machines see each other's lock; a holder
whose machine crashes keeps it until the server's lease expires (NFSv4: about 90 s). A mount with ``nolock`` or
``local_lock=flock`` (and Lustre without ``-o flock``) only locks within one machine, or not at all: where the file
system refuses locks the run goes on with a warning rather than stopping every run on such a disk.
"""

from __future__ import annotations

import errno
import fcntl
import json
import os
import socket
import stat
import time
from pathlib import Path

from dit_lora.core.collective import main_process_check  # re-exported: a check whose refusal every rank raises
from dit_lora.core.errors import UserError

LOCK_FILE = ".dit-lora.lock"
#: errors of a file system that has no working locks (not "held by another process")
_NO_LOCKS = {errno.ENOLCK, errno.EOPNOTSUPP, errno.ENOSYS, errno.EINVAL}

# Locks this process holds, by lock-file path: [descriptor, acquisitions]. A second run in the same process (tests,
# notebooks) re-enters its own lock instead of refusing itself, since flock on a second descriptor of the same file
# would conflict; the count keeps the lock until the last of them releases it.
_HELD: dict[str, list[int]] = {}


def _describe(fd: int) -> str:
    """Who holds the lock, from the file's content (written by the holder just after it took the lock)."""
    try:
        info = json.loads(os.pread(fd, 4096, 0).decode() or "{}")
        return f"pid {info['pid']} on host {info['host']}, started {info['started']}"
    except (OSError, ValueError, KeyError, TypeError):
        return "another process (it has not written its pid, host and start time yet)"


def acquire(output_dir: str | Path) -> str | None:
    """Lock ``output_dir`` (created if missing) for this process until it exits or :func:`release` is called.

    Raises :class:`UserError` naming the holder (pid, host, start time) when another live run holds it. Returns a
    warning line when the file system cannot lock at all (the run goes on), else None.
    """
    out = Path(output_dir)
    _make_folder(out)
    path = out / LOCK_FILE
    key = str(path.resolve())
    if key in _HELD:
        _HELD[key][1] += 1
        return None
    fd = _open_lock_file(path, out)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        holder = _describe(fd)
        os.close(fd)
        raise UserError(
            f"--output_dir `{out}` is in use by another run: {holder}. Two runs in one folder would replace each "
            "other's adapter and checkpoints, so this one stops before loading anything. Wait for that run to end "
            "(or stop it with Ctrl-C or `kill PID`), or choose another --output_dir; --overwrite_output_dir does not "
            f"override a running run. The lock ({path}) is released by the system when that process exits, even "
            "when it is killed."
        ) from None
    except OSError as err:
        os.close(fd)
        if err.errno not in _NO_LOCKS:
            raise
        return (
            f"warning: the file system of --output_dir `{out}` does not support locks ({os.strerror(err.errno)}), "
            "so nothing stops a second run from writing the same folder: start one run per --output_dir."
        )
    info = {
        "pid": os.getpid(),
        "host": socket.gethostname(),
        "started": time.strftime("%Y-%m-%d %H:%M:%S %z", time.localtime()),
    }
    os.ftruncate(fd, 0)
    os.pwrite(fd, json.dumps(info).encode() + b"\n", 0)
    _HELD[key] = [fd, 1]
    return None


def release(output_dir: str | Path) -> None:
    """Undo one :func:`acquire` of ``output_dir`` by this process; the lock is given up when the last one is undone
    (a no-op when it holds none). The file stays: deleting it would let a run that opened it just before lock a file
    no later run sees."""
    key = str((Path(output_dir) / LOCK_FILE).resolve())
    held = _HELD.get(key)
    if held is None:
        return
    held[1] -= 1
    if held[1] <= 0:
        del _HELD[key]
        os.close(held[0])  # closing the only descriptor releases the flock


def holds(output_dir: str | Path) -> int:
    """How many :func:`acquire` calls of this process hold ``output_dir``'s lock now (0: none)."""
    held = _HELD.get(str((Path(output_dir) / LOCK_FILE).resolve()))
    return held[1] if held is not None else 0


def _open_lock_file(path: Path, out: Path) -> int:
    """Open (create) the lock file itself, never what a link there points to: the lock's content would overwrite
    that file. A link or anything but a regular file is one paragraph."""
    try:
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC | os.O_NOFOLLOW | os.O_NONBLOCK, 0o644)
    except OSError as err:
        if err.errno not in (errno.ELOOP, errno.ENXIO, errno.EISDIR, errno.EWOULDBLOCK):
            raise
        fd = None
    if fd is not None and stat.S_ISREG(os.fstat(fd).st_mode):
        return fd
    if fd is not None:
        os.close(fd)
    kind = f"a symbolic link to {os.readlink(path)}" if path.is_symlink() else "not a regular file"
    raise UserError(
        f"The lock file {path} of --output_dir `{out}` is {kind}. dit-lora writes its lock there and "
        "will not write through a link or into anything else. Remove it (`rm` the link itself, not its "
        "target) and run again, or choose another --output_dir."
    )


def _make_folder(out: Path) -> None:
    """Create ``out`` for its lock file; a path that cannot be a folder is one paragraph, not a traceback."""
    if out.exists() and not out.is_dir():
        raise UserError(f"--output_dir `{out}` is a file, not a folder. Choose a folder path.")
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as err:
        raise UserError(
            f"--output_dir `{out}` could not be created ({err.strerror or err}). Choose a folder you can "
            "write to, or create it first."
        ) from None


def lock_for_run(output_dir: str | Path, accelerator) -> str | None:
    """:func:`acquire` on the main process (see :func:`~.collective.main_process_check`); returns its warning, if
    any."""
    return main_process_check(accelerator, lambda: acquire(output_dir), what=f"locking --output_dir `{output_dir}`")


__all__ = ["LOCK_FILE", "acquire", "holds", "lock_for_run", "main_process_check", "release"]
