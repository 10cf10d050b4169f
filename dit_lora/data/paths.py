"""Where a path written in a data file points, and which files a data folder holds: inside the folder, or refused.

Metadata files (``metadata.jsonl``/``.csv``, ``videos.txt``, a video-QA annotation file) name their
media by path. A path that leaves the data folder (``../outside/secret.png``, ``/etc/hostname``) is
never opened: a data folder shared or downloaded from elsewhere must not make a run read (and train
on, and cache, and log) files the user never put in it.

Links count where they lead. A symlink inside the folder is resolved, and never followed out of it (the folder
itself may be a link: its resolved location is the folder): a path written through a link that leads out of the
folder is refused like ``..``, and :class:`FolderWalk`, the one listing of a data folder's files (images, clips,
captions, masks, kohya folders, metadata files), leaves out a link that leads out of the folder or loops, and says
so once per folder with the count and an example. A file link to another file of the folder is listed (a sample of
its own, a copy of its target: said in one line); a folder link that points inside the folder is not followed
(its files are listed under their own folder: said in one line). An absolute path inside the folder (as written,
or inside the folder's resolved location) is accepted and named relative to the folder; a video-QA annotation
file's absolute paths outside it are used as written (``absolute_as_written``: LLaMA-Factory's data is written so).
"""

from __future__ import annotations

import errno
import os
import posixpath
from collections.abc import Callable, Iterator
from typing import Any, NamedTuple

__all__ = ["FolderWalk", "Located", "is_hidden", "locate", "printable", "refusal_text"]


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
        f"must stay inside that folder, and links inside it are not followed out of it. Copy the file into the "
        f"folder and name it relative to the folder{hint}"
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
    root: str | os.PathLike,
    written: str,
    *,
    rel_dir: str = "",
    field: str = "file_name",
    hint: str = "",
    absolute_as_written: bool = False,
) -> Located:
    """Place ``written`` (a path from a data file in ``root/rel_dir``) in ``root``, or refuse it.

    ``written`` is relative to ``root/rel_dir`` unless absolute; backslashes count as separators. ``..`` is
    resolved on the text first, then the links on the way: a path that leaves ``root`` as written, or through a
    link inside ``root`` that leads out of it, is refused, so one written path can never reach outside ``root``.
    An absolute path is accepted when it lies in ``root`` as given or in its resolved location (``root`` may
    itself be a link). With ``absolute_as_written`` (a video-QA annotation file, where LLaMA-Factory and VideoChat2
    data name clips by absolute paths) an absolute path outside ``root`` is used as written: the user wrote it in
    the file they pointed at; ``..`` and links out of ``root`` stay refused for relative paths.
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
                placed = os.path.join(abs_root, *inside.split("/")) if inside else abs_root
                return _resolved(Located(inside or ".", placed, None), abs_root, field)
        if absolute_as_written:
            return Located(target, target, None)
        return Located(target, None, refusal_text(written, abs_root, field, hint))
    key = posixpath.normpath(posixpath.join(rel_dir, text)) if rel_dir else posixpath.normpath(text)
    if key == ".." or key.startswith("../"):
        return Located(key, None, refusal_text(written, abs_root, field, hint))
    return _resolved(Located(key, os.path.normpath(os.path.join(abs_root, *key.split("/"))), None), abs_root, field)


def _resolved(located: Located, abs_root: str, field: str) -> Located:
    """``located`` (inside ``abs_root`` as written), refused when a link on its way leads out of the folder."""
    assert located.path is not None
    real_root = os.path.realpath(abs_root)
    real = os.path.realpath(located.path)
    if _within(real, real_root) is not None:
        return located
    return Located(
        located.key,
        None,
        f"{field} {located.key!r} is reached through a link that leads out of the data folder {abs_root} (to "
        f"{real}; refused, never opened): links inside the data folder are not followed out of it. Copy the file "
        f"into the folder, or pass the folder it is in as the data folder",
    )


def is_hidden(name: str) -> bool:
    """Whether a file or folder name is skipped when a data folder is listed (the rule of `datasets`: skips
    ``.ipynb_checkpoints``, ``.DS_Store``, ``__MACOSX`` and friends)."""
    return name.startswith(".") or name.startswith("__")


#: how many link names a line shows
_NAMED = 3


class FolderWalk:
    """The files of a data folder, listed with its links resolved and never followed out of it.

    Iterating gives ``(dirpath, rel_dir, dirnames, filenames)`` top-down like ``os.walk`` (``rel_dir``:
    "/"-separated, "" at the root; names sorted, hidden ones skipped; prune ``dirnames`` in place to skip a folder).
    A link that leads out of the folder, or loops, is left out (:attr:`left_out`); a folder link that points
    inside it is not followed (:attr:`inner_folders`: its files are listed under their own folder); a file link to
    another file of the folder is listed (:attr:`copies`). :meth:`report` says each once.
    """

    #: (root, kind, names) already said in this process: a folder listed twice in one run is said once
    _said: set[tuple[str, str, tuple[str, ...]]] = set()

    def __init__(self, root: str | os.PathLike) -> None:
        self.root = os.fspath(root)
        self.real_root = os.path.realpath(self.root)
        self.left_out: list[tuple[str, str]] = []  #: (key, where it leads, or "a loop")
        self.inner_folders: list[str] = []  #: keys of folder links that point inside the folder
        self.copies: list[str] = []  #: keys of file links to another file of the folder

    def __iter__(self) -> Iterator[tuple[str, str, list[str], list[str]]]:
        for dirpath, dirnames, filenames in os.walk(self.root):  # links are judged here, never followed by walk
            rel_dir = os.path.relpath(dirpath, self.root).replace(os.sep, "/")
            rel_dir = "" if rel_dir == "." else rel_dir
            dirnames[:] = [d for d in sorted(dirnames) if not is_hidden(d) and self._folder(dirpath, rel_dir, d)]
            files = [f for f in sorted(filenames) if not is_hidden(f) and self._file(dirpath, rel_dir, f)]
            yield dirpath, rel_dir, dirnames, files

    def _key(self, rel_dir: str, name: str) -> str:
        return posixpath.join(rel_dir, name) if rel_dir else name

    def _leads(self, path: str) -> str | None:
        """Where the link ``path`` leads when that is outside the folder ("a loop" when it never ends), else None."""
        try:
            os.stat(path)
        except OSError as err:
            if err.errno == errno.ELOOP:
                return "a loop"
        real = os.path.realpath(path)
        return None if _within(real, self.real_root) is not None else real

    def _folder(self, dirpath: str, rel_dir: str, name: str) -> bool:
        """Whether to walk into ``name``: a real folder; a link inside is not followed (its files are listed under
        their real folder)."""
        return self._keep(dirpath, rel_dir, name, self.inner_folders, follow_inner=False)

    def _file(self, dirpath: str, rel_dir: str, name: str) -> bool:
        """Whether to list ``name``: a real file, or a link to a file inside (a copy of it, said so)."""
        return self._keep(dirpath, rel_dir, name, self.copies, follow_inner=True)

    def _keep(self, dirpath: str, rel_dir: str, name: str, inner: list[str], follow_inner: bool) -> bool:
        path = os.path.join(dirpath, name)
        if not os.path.islink(path):
            return True
        leads = self._leads(path)
        if leads is not None:
            self.left_out.append((self._key(rel_dir, name), leads))
            return False
        inner.append(self._key(rel_dir, name))
        return follow_inner

    def report(self, log: Callable[[str], Any], flag: str = "--train_data_dir", noun: str = "file") -> None:
        """One line each: the links left out (count and an example), the folder links not followed, the file links
        listed as copies; each said once per folder and process."""
        if self.left_out:
            key, leads = self.left_out[0]
            self._say(
                log,
                "out",
                [k for k, _ in self.left_out],
                f"{flag} {self.root}: {len(self.left_out)} link(s) lead out of the folder or loop and are left out, "
                f"never opened (e.g. {printable(key)!r} -> {leads}): links inside a data folder are not followed out "
                f"of it. Copy those {noun}s into the folder, or pass the folder they are in as {flag}",
            )
        if self.inner_folders:
            self._say(
                log,
                "inner",
                self.inner_folders,
                f"{flag} {self.root}: {len(self.inner_folders)} folder link(s) point inside the folder and are not "
                f"followed (their {noun}s are listed once, under their own folder): {self._names(self.inner_folders)}",
            )
        if self.copies:
            self._say(
                log,
                "copies",
                self.copies,
                f"{flag} {self.root}: {len(self.copies)} file link(s) point to another file of the folder, each "
                f"listed as a {noun} of its own (a duplicate of the file it points to): {self._names(self.copies)}",
            )

    @staticmethod
    def _names(keys: list[str]) -> str:
        shown = ", ".join(printable(k) for k in keys[:_NAMED])
        return shown + (f" and {len(keys) - _NAMED} more" if len(keys) > _NAMED else "")

    def _say(self, log: Callable[[str], Any], kind: str, keys: list[str], line: str) -> None:
        said = (self.real_root, kind, tuple(keys))
        if said not in FolderWalk._said:
            FolderWalk._said.add(said)
            log(line)
