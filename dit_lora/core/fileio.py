"""Atomic file writes: a reader, another rank or a killed run never sees half a file.

Every helper writes to a temporary file in the destination's own folder (same file system, so the
rename is atomic), flushes it to disk, then ``os.replace``-s it over the destination. The temporary
name carries the process and thread id, so ranks and threads writing the same content-addressed
file never share one. On any error the temporary file is removed and the destination is untouched.

Every file a run writes gets the mode the umask gives a new file (``0o666 & ~umask``: 0644 under the usual 022),
whatever its writer chose: safetensors' writer creates files 0600, which a ComfyUI service or a web server running
as another user cannot read. And a safetensors file's metadata is written in sorted key order: safetensors (0.8)
writes it from a Rust ``HashMap`` in an order that changes with every process (safetensors issue 584), so the same
tensors and metadata gave another ``sha256`` in each run. :func:`atomic_write` does both to its temporary file, and
the folder writers (the adapter's staging folder, a checkpoint's) call :func:`settle_files` before their rename.

Folder-level swaps (checkpoints, exported adapters, demo assets) build a whole staging folder and
rename it; they live with their writers (:mod:`dit_lora.training.checkpoint`,
:mod:`dit_lora.output.adapter`, :mod:`dit_lora.data.synthetic`) and use these helpers for their files.

A full disk (``ENOSPC``, or a quota's ``EDQUOT``) surfaces in many shapes: an ``OSError`` from Python, a
``SafetensorError`` carrying "os error 28", or torch's zip writer's bare ``RuntimeError`` ("unexpected pos",
"iostream error") that names no cause at all. :func:`is_disk_full` recognises them, and
:func:`reporting_disk_full` turns them into one :class:`DiskFullError` paragraph: what was being written,
where, how much it needs and how much is free.
"""

from __future__ import annotations

import contextlib
import errno
import json
import os
import shutil
import tempfile
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from dit_lora.core.errors import UserError

__all__ = [
    "DiskFullError",
    "atomic_write",
    "folder_bytes",
    "default_file_mode",
    "free_bytes",
    "give_default_modes",
    "human_bytes",
    "is_disk_full",
    "reporting_disk_full",
    "save_safetensors_atomic",
    "settle_files",
    "sort_safetensors_metadata",
    "write_bytes_atomic",
    "write_json_atomic",
    "write_text_atomic",
]


_UMASK_LOCK = threading.Lock()


def _umask() -> int:
    """The process's umask, read without changing it where the kernel says it (Linux 4.7+: ``/proc/self/status``).

    ``os.umask`` can only be read by setting it, and it is process-wide: another thread creating a file in between
    would get the temporary value. The fallback sets the strictest one (077) for that instant, so such a file
    comes out more private, never more open, and a lock keeps two of our own reads from interleaving.
    """
    try:
        with open("/proc/self/status", encoding="ascii") as status:
            for line in status:
                if line.startswith("Umask:"):
                    return int(line.split()[1], 8)
    except (OSError, ValueError, IndexError):
        pass
    with _UMASK_LOCK:
        mask = os.umask(0o077)
        os.umask(mask)
    return mask


def default_file_mode() -> int:
    """The mode a new file gets from the umask: ``0o666 & ~umask`` (0644 under 022, 0640 under 027)."""
    return 0o666 & ~_umask()


def give_default_modes(path: str | os.PathLike) -> None:
    """Give ``path`` (a file, or every file under a folder) :func:`default_file_mode`: what ``open()`` would have
    given it, whatever mode its writer chose (safetensors creates its files 0600)."""
    mode = default_file_mode()
    for file in _files(path):
        os.chmod(file, mode)


def _files(path: str | os.PathLike) -> list[Path]:
    """``path`` itself, or every plain file under the folder ``path`` (links left alone: they are not ours)."""
    path = Path(path)
    return [p for p in path.rglob("*") if p.is_file() and not p.is_symlink()] if path.is_dir() else [path]


def sort_safetensors_metadata(path: str | os.PathLike) -> bool:
    """Rewrite the header of the safetensors file ``path`` in place with its ``__metadata__`` keys sorted; returns
    whether it changed.

    The header (8 bytes of length, then JSON) keeps its length: the same keys and values in another order are the
    same bytes rearranged, so the tensors' offsets stay valid. A header that would not come out the same length
    (a writer escaping text differently than this JSON encoder) is left as it is.
    """
    import struct

    with open(path, "r+b") as fh:
        head = fh.read(8)
        if len(head) < 8:
            return False
        (size,) = struct.unpack("<Q", head)
        raw = fh.read(min(size, 100_000_000))
        text = raw.rstrip(b" ")  # safetensors pads the header with spaces to 8 bytes
        try:
            header = json.loads(text, object_pairs_hook=dict)
        except ValueError:
            return False
        metadata = header.get("__metadata__") if isinstance(header, dict) else None
        if not isinstance(metadata, dict) or list(metadata) == sorted(metadata):
            return False
        header["__metadata__"] = dict(sorted(metadata.items()))
        new = json.dumps(header, separators=(",", ":"), ensure_ascii=False).encode("utf-8")
        if len(new) != len(text) or json.loads(new) != json.loads(text):
            return False
        fh.seek(8)
        fh.write(new)
    return True


def settle_files(path: str | os.PathLike) -> None:
    """What every file a run writes ends with, for ``path`` (a file, or every file under a folder): the umask's mode
    (:func:`give_default_modes`) and, for a ``.safetensors`` file, its metadata in sorted order
    (:func:`sort_safetensors_metadata`)."""
    files = _files(path)
    for file in files:
        if file.suffix == ".safetensors":
            sort_safetensors_metadata(file)
    mode = default_file_mode()  # read once: the umask is the process's
    for file in files:
        os.chmod(file, mode)


def atomic_write(path: str | os.PathLike, write: Callable[[Path], object]) -> Path:
    """Create ``path`` atomically: ``write(tmp)`` fills a temporary file, which is settled (the umask's mode whatever
    ``write`` chose; a safetensors file's metadata in sorted order: :func:`settle_files`), fsynced and renamed."""
    path = Path(path)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.{threading.get_ident()}.tmp")
    try:
        write(tmp)
        if path.suffix == ".safetensors":
            sort_safetensors_metadata(tmp)
        give_default_modes(tmp)
        with open(tmp, "rb") as fh:
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    return path


def write_bytes_atomic(path: str | os.PathLike, data: bytes) -> Path:
    """``path.write_bytes(data)``, atomically."""
    return atomic_write(path, lambda tmp: tmp.write_bytes(data))


def write_text_atomic(path: str | os.PathLike, text: str) -> Path:
    """``path.write_text(text)`` (UTF-8), atomically."""
    return atomic_write(path, lambda tmp: tmp.write_text(text, encoding="utf-8"))


def write_json_atomic(path: str | os.PathLike, data: Any) -> Path:
    """Indented JSON, atomically; NaN/Inf are refused (JSON has none: record them as null first)."""
    return write_text_atomic(path, json.dumps(data, indent=2, allow_nan=False, default=str))


def save_safetensors_atomic(tensors: dict, path: str | os.PathLike, metadata: dict[str, str] | None = None) -> Path:
    """``safetensors.torch.save_file``, atomically."""
    from safetensors.torch import save_file

    return atomic_write(path, lambda tmp: save_file(tensors, str(tmp), metadata=metadata))


class DiskFullError(UserError):
    """The disk (or a quota) ran out while writing an output: a user-fixable environment problem (exit 2)."""


_FULL_ERRNOS = {errno.ENOSPC, errno.EDQUOT}
# What the libraries say when the OS said ENOSPC/EDQUOT: safetensors' Rust I/O error, and its text.
_FULL_TEXT = (
    "no space left on device",
    "disk quota exceeded",
    "os error 28",
    "os error 122",
    "storagefull",
    "quotaexceeded",
)
# torch.save's zip writer loses the errno: a short write shows up only as these (checked against the free space).
_TORCH_WRITE_TEXT = ("unexpected pos", "iostream error", "file write failed", "pytorchstreamwriter failed")


def _chain(err: BaseException | None) -> Iterator[BaseException]:
    seen = set()
    while err is not None and id(err) not in seen:
        seen.add(id(err))
        yield err
        err = err.__cause__ or err.__context__


def free_bytes(path: str | os.PathLike) -> int | None:
    """Free bytes on the file system that holds ``path`` (its nearest existing parent); None if unknown."""
    path = Path(path).absolute()
    while not path.exists() and path != path.parent:
        path = path.parent
    try:
        return shutil.disk_usage(path).free
    except OSError:
        return None


def is_disk_full(err: BaseException, where: str | os.PathLike | None = None, needed: int | None = None) -> bool:
    """Whether ``err`` (or an error it was raised from) means the disk or a quota is full.

    torch's writer reports a short write without an errno; it counts as a full disk when ``where``'s file
    system has less than ``needed`` (or 1 MiB) free.
    """
    for e in _chain(err):
        if isinstance(e, OSError) and e.errno in _FULL_ERRNOS:
            return True
        text = str(e).lower()
        if any(t in text for t in _FULL_TEXT):
            return True
        if where is not None and isinstance(e, RuntimeError) and any(t in text for t in _TORCH_WRITE_TEXT):
            free = free_bytes(where)
            return free is not None and free < max(needed or 0, 2**20)
    return False


def human_bytes(n: int | None) -> str:
    """``123.4 MB`` (decimal units, as ``df -H`` and file managers show them)."""
    if n is None:
        return "an unknown amount"
    size: float = n  # an int until the first division: "123 bytes", not "123.0 bytes"
    for unit in ("bytes", "KB", "MB", "GB", "TB"):
        if abs(size) < 1000 or unit == "TB":
            return f"{size} bytes" if unit == "bytes" else f"{size:.1f} {unit}"
        size /= 1000
    return f"{size:.1f} TB"  # unreachable


def folder_bytes(folder: str | os.PathLike) -> int:
    """Total size of the files under ``folder`` (0 if it does not exist)."""
    folder = Path(folder)
    return sum(p.stat().st_size for p in folder.rglob("*") if p.is_file()) if folder.is_dir() else 0


def disk_full_message(what: str, where: str | os.PathLike, needed: int | None, advice: str) -> str:
    """One paragraph: what could not be written where, the space it needs, the space free, and ``advice``."""
    free = free_bytes(where)
    need = f"It needs about {human_bytes(needed)}; " if needed else ""
    return (
        f"No space left on device while writing {what} to {where}. {need}{human_bytes(free)} are free on that "
        f"file system (a disk quota may allow less). {advice}"
    )


@contextlib.contextmanager
def reporting_disk_full(
    what: str,
    where: str | os.PathLike,
    *,
    needed: int | None = None,
    advice: str | Callable[[], str] = "Free some space and run again.",
) -> Iterator[None]:
    """Turn a full disk inside the block into a :class:`DiskFullError` paragraph; other errors pass unchanged.

    ``advice`` (or a function returning it, called only on failure) says which state survived and how to
    continue.
    """
    try:
        yield
    except UserError:
        raise
    except Exception as err:
        if not is_disk_full(err, where, needed):
            raise
        text = advice() if callable(advice) else advice
        raise DiskFullError(disk_full_message(what, where, needed, text)) from err


_NOT_WRITABLE: dict[int | None, str] = {
    errno.EROFS: "read-only file system",
    errno.EACCES: "permission denied",
    errno.EPERM: "permission denied (an immutable folder?)",
}


def check_writable(folder: str | os.PathLike, flag: str, advice: str = "") -> None:
    """Raise one :class:`UserError` paragraph when ``folder`` (``flag`` names the option that chose it) cannot be
    written: it, or the nearest folder above it that exists (where it will be created), refuses a new file.

    A real probe (create and remove a file) rather than ``os.access``: root passes ``access`` on an immutable
    (``chattr +i``) folder, and only the write tells. Called before anything loads, so a read-only folder costs
    seconds, not a model load and a traceback.
    """
    path = Path(folder).expanduser()
    probe_in = path
    while not probe_in.exists() and probe_in != probe_in.parent:
        probe_in = probe_in.parent
    if not probe_in.is_dir():
        return  # a file in the way: the caller's own checks say so in their words
    try:
        fd, name = tempfile.mkstemp(prefix=".dit-lora-write-check-", dir=probe_in)
        os.close(fd)
        os.unlink(name)
    except OSError as err:
        reason = _NOT_WRITABLE.get(err.errno)
        if reason is None:
            raise
        where = "" if probe_in == path else f" (it would be created in {probe_in}, which refuses new files)"
        raise UserError(
            f"`{flag} {path}` is not writable ({reason}){where}: choose another folder with {flag}, or make this one "
            f"writable (remount it read-write, or fix its owner and permissions), and run again.{advice}"
        ) from None
