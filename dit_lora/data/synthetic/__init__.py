"""What the offline demos share: the shapes data set (captioned or in class folders) and the atomic folder build.

Each family's tiny model is its own ``families/<name>/demo.py``; everything is built locally from configs (nothing
comes from the Hub), so tests, the demos and CPU benchmarks run offline. The shapes API is imported lazily:
importing this package must not pull in torch or diffusers (seconds of import time), and the submodules themselves
import :func:`build_directory_atomically` from it.
"""

from __future__ import annotations

import json
import os
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

from dit_lora.core.errors import UserError
from dit_lora.core.fileio import give_default_modes

__all__ = [
    "build_directory_atomically",
    "is_user_folder",
    "make_shapes_dataset",
    "make_shapes_class_dataset",
    "SHAPES_VALIDATION_PROMPT",
]

_LAZY = {
    "make_shapes_dataset": "dit_lora.data.synthetic.shapes",
    "make_shapes_class_dataset": "dit_lora.data.synthetic.shapes",
    "SHAPES_VALIDATION_PROMPT": "dit_lora.data.synthetic.shapes",
}


def __getattr__(name: str) -> Any:
    # PEP 562 lazy attribute: only the submodule that defines `name` gets imported.
    if name in _LAZY:
        import importlib

        module = importlib.import_module(_LAZY[name])
        return getattr(module, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def _read_marker(path: Path, marker_name: str) -> dict | None:
    try:
        return json.loads((path / marker_name).read_text())
    except (OSError, ValueError):
        return None


def is_user_folder(path: str | Path, marker_name: str) -> bool:
    """True when ``path`` (``--train_data_dir`` of a ``--demo`` run) already holds data the demo did not build.

    Such a folder is the user's own data: the demo model trains on it as it is, instead of refusing to
    overwrite it (:func:`build_directory_atomically`). A folder holding this build's ``marker_name``, an empty
    one or none is (re)built. A file there is one paragraph (:class:`~dit_lora.core.errors.UserError`).
    """
    path = Path(path)
    if path.exists() and not path.is_dir():
        raise UserError(
            f"--train_data_dir {str(path)!r} is a file, and --demo writes its generated images into that folder. "
            f"Pass a folder (a new one to get the demo images, or one that holds your own images)."
        )
    return path.is_dir() and any(path.iterdir()) and not (path / marker_name).exists()


def build_directory_atomically(
    path: str | os.PathLike,
    marker_name: str,
    marker: dict,
    build: Callable[[Path], object],
) -> Path:
    """Create directory ``path`` with ``build(tmp_dir)`` (its return value unused) unless an identical build is
    already there.

    ``marker`` (a JSON-able dict) is written to ``path/marker_name`` as the last step of a
    build; a directory whose marker equals ``marker`` is complete and is left untouched (no
    file is rewritten, so mtimes stay put).  The build happens in a sibling temporary
    directory that is renamed into place, so a reader never sees a half-written directory and
    two processes building the same path concurrently (e.g. both ranks of a distributed test)
    cannot corrupt it: the loser of the race discards its copy.

    A stale build (our marker with different content) is replaced.  An existing non-empty
    directory without our marker is never deleted: that raises ``FileExistsError``.
    """
    path = Path(path)
    if _read_marker(path, marker_name) == marker:
        return path
    if path.exists() and not path.is_dir():
        raise FileExistsError(f"{path} exists and is not a directory")
    if path.is_dir() and any(path.iterdir()) and _read_marker(path, marker_name) is None:
        raise FileExistsError(
            f"{path} is a non-empty directory that was not built by dit_lora.data.synthetic "
            f"(no {marker_name}); refusing to overwrite it"
        )

    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.parent / f".{path.name}.tmp-{os.getpid()}"
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir()
    try:
        build(tmp)
        give_default_modes(tmp)  # safetensors and save_pretrained write 0600: the umask's mode, as every file we write
        # The marker goes last: its presence means "this directory is complete".
        (tmp / marker_name).write_text(json.dumps(marker, indent=2, sort_keys=True) + "\n")
        try:
            # rename(2) onto an empty directory (or nothing) is atomic; onto a non-empty one it
            # fails, which is what happens when another process won the race or a stale
            # build sits there.
            os.replace(tmp, path)
        except OSError:
            if _read_marker(path, marker_name) == marker:
                return path  # another process finished the same build first
            # Stale build of ours: move it aside (atomic), put ours in place, then delete it.
            trash = path.parent / f".{path.name}.old-{os.getpid()}"
            shutil.rmtree(trash, ignore_errors=True)
            try:
                os.replace(path, trash)
            except FileNotFoundError:
                pass  # a concurrent process moved it aside already
            try:
                os.replace(tmp, path)
            except OSError:
                if _read_marker(path, marker_name) != marker:
                    raise
            shutil.rmtree(trash, ignore_errors=True)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return path
