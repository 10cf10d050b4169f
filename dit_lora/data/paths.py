"""Where a path written in a data file points: inside the data folder, or refused.

Metadata files (``metadata.jsonl``/``.csv``, ``videos.txt``, a video-QA annotation file) name their
media by path. A path that leaves the data folder (``../outside/secret.png``, ``/etc/hostname``) is
never opened: a data folder shared or downloaded from elsewhere must not make a run read (and train
on, and cache, and log) files the user never put in it.

The rule is lexical, on the path as written, so symlinks keep working: a symlink *inside* the folder
may point anywhere (datasets on another disk are usually linked in), while a written path may not
climb out of the folder with ``..`` or name an absolute location outside it. An absolute path inside
the folder (as written, or inside the folder's resolved location) is accepted and named relative to
the folder.
"""

from __future__ import annotations

import os
import posixpath
from typing import NamedTuple

__all__ = ["Located", "locate", "printable", "refusal_text"]


class Located(NamedTuple):
    """A written path, placed: ``key`` ("/"-separated, relative to the folder; the written path itself when
    refused), ``path`` (absolute, None when refused) and ``refused`` (the reason, or None)."""

    key: str
    path: str | None
    refused: str | None


def printable(text: str) -> str:
    """``text`` itself, or its repr without quotes when it holds characters a terminal would hide or act on
    (NUL, escape sequences, newlines): how a name read from a data file is shown in keys and logs."""
    return text if text.isprintable() else repr(text)[1:-1]


def refusal_text(written: str, root: str, field: str, hint: str = "") -> str:
    """The quarantine reason of a path that leaves the data folder (one sentence with the fix; ``hint`` adds one)."""
    return (
        f"{field} {written!r} leaves the data folder {root} (refused, never opened): paths in the data files "
        f"must stay inside that folder. Move the file into it, or link it in (a symlink inside the folder may "
        f"point anywhere), and name it relative to the folder{hint}"
    )


def _within(path: str, folder: str) -> str | None:
    """``path`` relative to ``folder`` ("/"-separated) when ``path`` lies inside it (both absolute, normalised)."""
    if path == folder:
        return ""
    prefix = folder if folder.endswith(os.sep) else folder + os.sep
    if not path.startswith(prefix):
        return None
    return path[len(prefix) :].replace(os.sep, "/")


def locate(
    root: str | os.PathLike, written: str, *, rel_dir: str = "", field: str = "file_name", hint: str = ""
) -> Located:
    """Place ``written`` (a path from a data file in ``root/rel_dir``) in ``root``, or refuse it.

    ``written`` is relative to ``root/rel_dir`` unless absolute; backslashes count as separators. The check
    is lexical (``..`` resolved on the text, no symlink followed), so a link inside ``root`` that points to
    another disk is allowed, and one written path can never reach outside ``root``. An absolute path is
    accepted when it lies in ``root`` as given or in its resolved location (``root`` may itself be a link).
    ``field`` names the column or file in the reason (``file_name``, ``videos.txt line 3``, ``"video"``);
    ``hint`` is appended to it (another way out, e.g. a flag that moves the folder).
    """
    root = os.fspath(root)
    abs_root = os.path.normpath(os.path.abspath(root))
    text = written.strip().replace("\\", "/")
    if posixpath.isabs(text) or os.path.isabs(text):
        target = os.path.normpath(text)
        for folder in dict.fromkeys((abs_root, os.path.realpath(abs_root))):
            inside = _within(target, folder)
            if inside is not None:
                return Located(inside or ".", os.path.join(abs_root, *inside.split("/")) if inside else abs_root, None)
        return Located(target, None, refusal_text(written, abs_root, field, hint))
    key = posixpath.normpath(posixpath.join(rel_dir, text)) if rel_dir else posixpath.normpath(text)
    if key == ".." or key.startswith("../"):
        return Located(key, None, refusal_text(written, abs_root, field, hint))
    return Located(key, os.path.normpath(os.path.join(abs_root, *key.split("/"))), None)
