"""Atomic file writes: a reader, another rank or a killed run never sees half a file.

Every helper writes to a temporary file in the destination's own folder (same file system, so the
rename is atomic), flushes it to disk, then ``os.replace``-s it over the destination. The temporary
name carries the process and thread id, so ranks and threads writing the same content-addressed
file never share one. On any error the temporary file is removed and the destination is untouched.

Folder-level swaps (checkpoints, exported adapters, demo assets) build a whole staging folder and
rename it; they live with their writers (:mod:`dit_lora.training.checkpoint`,
:mod:`dit_lora.output.adapter`, :mod:`dit_lora.demo`) and use these helpers for their files.
"""

from __future__ import annotations

import json
import os
import threading
from pathlib import Path
from typing import Any, Callable

__all__ = ["atomic_write", "save_safetensors_atomic", "write_bytes_atomic", "write_json_atomic",
           "write_text_atomic"]


def atomic_write(path: str | os.PathLike, write: Callable[[Path], None]) -> Path:
    """Create ``path`` atomically: ``write(tmp)`` fills a temporary file, which is fsynced and renamed."""
    path = Path(path)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.{threading.get_ident()}.tmp")
    try:
        write(tmp)
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
