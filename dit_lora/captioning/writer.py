"""Where captions go, safely: a ``<name>.txt`` beside each file (or ``--caption_extension``), or one
``metadata.jsonl``; what a killed run leaves behind and how the next one picks it up.

* A sidecar is written atomically (:func:`~dit_lora.core.fileio.write_text_atomic`: a temporary file, fsynced,
  renamed): a kill leaves the whole caption or none. An existing caption is kept unless ``--overwrite``.
* ``metadata.jsonl``: the rows a run writes go first to a journal beside it (one JSON line each, flushed and
  fsynced per batch); at the end the journal is merged into ``metadata.jsonl`` in one atomic replace (the rows of
  files not captioned, and their other columns, kept as they were) and removed.
* The journal is kept in both modes (``.dit-lora-captions.jsonl`` in the captioned folder): its first line holds
  the options that shape a caption, each further line one file captioned. A run that finds one resumes: the files
  it lists are not captioned again, ``--overwrite`` or not, and a torn last line (a kill mid-write) is dropped, its
  file captioned again. A journal written with other options is refused (mixing two prompts' captions silently
  would be wrong). It is removed when a run ends having captioned everything it could.
"""

from __future__ import annotations

import json
import os
import posixpath
from pathlib import Path
from typing import Any

from dit_lora.core.errors import UserError
from dit_lora.core.fileio import write_text_atomic
from dit_lora.core.progress import say
from dit_lora.data.paths import is_hidden

__all__ = ["JOURNAL", "METADATA", "CaptionStore", "caption_path"]

#: the journal's name, in the captioned folder (hidden: a data folder listing skips it)
JOURNAL = ".dit-lora-captions.jsonl"
#: the lock a run holds on its folder (hidden, removed at the end)
LOCK = ".dit-lora-captions.lock"
#: the metadata file ``--metadata`` writes (what ``--train_data_dir`` reads, with ``--caption_column text``)
METADATA = "metadata.jsonl"


def caption_path(media: Path, extension: str) -> Path:
    """The sidecar caption of ``media``: its name with ``extension`` in place of its own (``a.png`` -> ``a.txt``)."""
    return media.with_name(media.stem + extension)


class CaptionStore:
    """The captions of one folder: which files have one, and writing new ones (sidecars or ``metadata.jsonl``)."""

    def __init__(
        self,
        root: Path,
        *,
        extension: str,
        metadata: bool,
        options: dict[str, Any],
        check: bool = True,
        subfolders: bool = True,
    ) -> None:
        self.root, self.extension, self.metadata = root, extension, metadata
        self.journal = root / JOURNAL
        self.options = options
        self.resumed: dict[str, str] = {}  #: key -> caption, from an interrupted run's journal
        #: --metadata: the resumed captions an earlier run merged into metadata.jsonl already (a hand edit of their rows
        #: since then stays)
        self.merged: set[str] = set()
        if check:
            self._check_metadata_files(subfolders)
        self._lock: Any = None
        self.existing: dict[str, list[dict[str, Any]]] = self._read_metadata() if metadata else {}
        #: --metadata: a file's own caption file (the user's), copied into metadata.jsonl, which training reads first
        self.copied: dict[str, str] = {}
        self.dropped_torn_line = False
        self._handle = None

    def _check_metadata_files(self, subfolders: bool) -> None:
        """Captions where training will read them: a metadata file is read before caption files (for clips, only
        the files it lists are trained; a subfolder's own wins over the root's), so ``.txt`` captions beside one
        could go unread, and rows written at the root could lose to a subfolder's; training refuses a folder with
        both metadata.jsonl and metadata.csv. ``subfolders``: False when one file of the folder is captioned (its
        folder's own metadata files only)."""
        for dirpath, dirnames, filenames in os.walk(self.root):
            dirnames[:] = [d for d in dirnames if not is_hidden(d)] if subfolders else []
            where = Path(dirpath)
            if "metadata.csv" in filenames:
                raise UserError(
                    f"dit-lora caption: {where / 'metadata.csv'} is read by training before caption files, and "
                    "dit-lora caption writes caption files or metadata.jsonl (a folder with both is refused). Convert "
                    "it to metadata.jsonl (one JSON object a line, the same columns) and pass --metadata, or move it "
                    "out of the folder."
                )
            if METADATA not in filenames or (self.metadata and where == self.root):
                continue
            raise UserError(
                f"dit-lora caption: {where / METADATA} is read by training before caption files (for clips, only the "
                "files it lists are trained; a subfolder's wins over the root's), so "
                + (
                    "rows written to the root's metadata.jsonl could go unread. Merge it into the root's, or move it "
                    "away."
                    if self.metadata
                    else f"new {self.extension} captions could go unread. Pass --metadata to add the captions to the "
                    "root's metadata.jsonl, or move it out of the folder to caption into files."
                )
            )

    def lock(self) -> None:
        """Hold the folder for this run (an advisory lock the kernel drops when the process dies): a second
        ``dit-lora caption`` on the same folder is refused instead of captioning everything twice. A file system
        without locks (some network mounts) is said, and the run goes on unlocked."""
        import errno
        import fcntl

        path = self.root / LOCK
        for _ in range(3):  # the lock file may be removed by the run that held it between our open and our lock
            fd = os.open(path, os.O_RDONLY | os.O_CREAT, 0o644)
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except OSError as err:
                os.close(fd)
                if err.errno in (errno.EWOULDBLOCK, errno.EAGAIN):
                    raise UserError(
                        f"dit-lora caption: another dit-lora caption is writing captions in {self.root} now. Let it "
                        "finish (run the same command afterwards to caption what it left), or stop it first."
                    )
                say(
                    f"note: {self.root} cannot be locked ({err.strerror}): a second run on it at once would not be refused"
                )
                return
            if os.path.exists(path) and os.stat(path).st_ino == os.fstat(fd).st_ino:
                self._lock = fd
                return
            os.close(fd)  # we locked a file the other run had just removed: take the new one

    # --- what is there ---------------------------------------------------------------------------------------
    def resume(self) -> None:
        """Read an interrupted run's journal, if any: its files count as captioned. Options that differ from this
        run's are one paragraph naming them."""
        if not self.journal.is_file():
            return
        if self.journal.stat().st_size == 0:  # created, killed before its first line: nothing to resume
            self.journal.unlink()
            return
        lines = self.journal.read_bytes().split(b"\n")
        if lines and lines[-1] == b"":
            lines.pop()
        elif lines:  # no newline at the end: the last line was being written when the run was killed
            lines.pop()
            self.dropped_torn_line = True
        rows = [_parse(line) for line in lines]
        if not rows or rows[0] is None or "options" not in rows[0]:
            raise UserError(self._unreadable_journal())
        self._check_options(rows[0]["options"])
        for row in rows[1:]:
            if row == {"merged": True}:  # every row above is in metadata.jsonl already: not merged again
                self.merged.update(self.resumed)
                continue
            if row is None or not isinstance(row.get("file_name"), str) or not isinstance(row.get("text"), str):
                raise UserError(self._unreadable_journal())
            self.resumed[row["file_name"]] = row["text"]
        if self.dropped_torn_line:  # rewrite without it, so this run's lines follow a whole one
            body = b"".join(line + b"\n" for line in lines)
            self.journal.write_bytes(body)

    def _check_options(self, earlier: Any) -> None:
        if not isinstance(earlier, dict):
            raise UserError(self._unreadable_journal())
        changed = [k for k in sorted(set(earlier) | set(self.options)) if earlier.get(k) != self.options.get(k)]
        if changed:
            said = "; ".join(_change(k, earlier.get(k), self.options.get(k)) for k in changed)
            kept = (
                "the captions it wrote that are not in metadata.jsonl yet are in that file only"
                if self.metadata
                else "the captions it already wrote stay, and are kept unless --overwrite"
            )
            raise UserError(
                f"dit-lora caption: {self.journal} is the journal of an unfinished captioning run of this folder "
                f"(interrupted, or with files that failed) with other options: {said}. Run that command again to "
                f"finish it, or delete that file to start over with the new options ({kept})."
            )

    def _unreadable_journal(self) -> str:
        return (
            f"dit-lora caption: {self.journal} is not a captioning journal dit-lora can read (it holds the progress of "
            "an interrupted run). Delete it and run again: captions already written stay, and are kept unless "
            "--overwrite."
        )

    def has_caption(self, key: str, media: Path) -> bool:
        """Whether ``media`` (``key`` in the folder) has a caption already: its caption file, or a metadata row.
        With ``--metadata`` a caption file without a row is copied into a row (:attr:`copied`): training reads
        metadata.jsonl first, so the user's caption would otherwise go unread."""
        if self.metadata and any(_text_of(row) for row in self.existing.get(key, ())):
            return True
        own = caption_path(media, self.extension)
        if not own.is_file():
            return False
        if self.metadata:
            try:
                self.copied[key] = own.read_text(encoding="utf-8").strip()
            except (OSError, UnicodeDecodeError) as err:
                raise UserError(
                    f"dit-lora caption --metadata: the caption {own} cannot be read as UTF-8 text ({err}); it would be "
                    "copied into metadata.jsonl. Mend it (or delete it to have the file captioned) and run again."
                )
        return True

    def _read_metadata(self) -> dict[str, list[dict[str, Any]]]:
        path = self.root / METADATA
        rows: dict[str, list[dict[str, Any]]] = {}
        if not path.is_file():
            return rows
        try:
            text = path.read_text(encoding="utf-8")
        except UnicodeDecodeError as err:
            raise UserError(
                f"dit-lora caption --metadata: {path} is not UTF-8 text ({err}). Save it as UTF-8 and rerun."
            )
        for number, line in enumerate(text.splitlines(), 1):
            if not line.strip():
                continue
            row = _parse(line.encode())
            if row is None or not isinstance(row.get("file_name"), str):
                raise UserError(
                    f"dit-lora caption --metadata: line {number} of {path} is not a JSON object with a `file_name`, "
                    "so the file cannot be updated without losing it. Mend that line (or move the file away) and run "
                    "again."
                )
            rows.setdefault(_normal_key(row["file_name"]), []).append(row)
        return rows

    # --- writing ---------------------------------------------------------------------------------------------
    def write(self, captioned: list[tuple[str, Path, str]]) -> None:
        """Write one batch's ``(key, media, caption)``: each sidecar atomically (``.txt`` mode), then the batch's
        journal lines, flushed to disk, so a resumed run never captions them again."""
        if not self.metadata:
            for _, media, text in captioned:
                write_text_atomic(caption_path(media, self.extension), text)
        handle = self._open_journal()
        handle.write("".join(json.dumps({"file_name": key, "text": text}) + "\n" for key, _, text in captioned))
        handle.flush()
        os.fsync(handle.fileno())

    def _open_journal(self):
        if self._handle is None:
            fresh = not self.journal.exists()
            self._handle = open(self.journal, "a", encoding="utf-8")  # noqa: SIM115 - kept open for the run
            if fresh:  # on disk before any caption line: a kill now leaves a journal the next run reads
                self._handle.write(json.dumps({"options": self.options}) + "\n")
                self._handle.flush()
                os.fsync(self._handle.fileno())
        return self._handle

    def finish(self, captions: dict[str, str], complete: bool) -> None:
        """End the run: ``metadata.jsonl`` merged with ``captions`` (every caption of this run and the resumed one's),
        and the journal removed when ``complete`` (nothing left that failed); otherwise it stays for the next run."""
        fresh = {key: text for key, text in captions.items() if key not in self.merged}
        if self.metadata and fresh:
            write_text_atomic(self.root / METADATA, _merged(self.root / METADATA, self.existing, fresh))
            if not complete:  # the journal stays: mark what is merged, so the rerun does not merge it again
                handle = self._open_journal()
                handle.write(json.dumps({"merged": True}) + "\n")
                handle.flush()
                os.fsync(handle.fileno())
        if complete:
            self.journal.unlink(missing_ok=True)
        self.release()

    def release(self) -> None:
        """Let go of the folder (:meth:`lock`); idempotent. The journal's handle is closed too."""
        if self._handle is not None:
            self._handle.close()
            self._handle = None
        if self._lock is not None:
            (self.root / LOCK).unlink(missing_ok=True)  # while still held: the next run makes its own
            os.close(self._lock)
            self._lock = None


def _normal_key(name: str) -> str:
    """A metadata row's ``file_name`` as the listing writes keys: ``./a.png`` and ``sub//b.png`` are ``a.png`` and
    ``sub/b.png``."""
    return posixpath.normpath(name.replace("\\", "/"))


def _text_of(row: dict[str, Any]) -> str:
    text = row.get("text")
    return text.strip() if isinstance(text, str) else ""


def _change(key: str, before: Any, now: Any) -> str:
    """One changed option, as the refusal names it: the prompt by name only (a paragraph each)."""
    if key == "prompt":
        return "--prompt/--prompt_file differs"
    return f"--{key} was {before!r}, now {now!r}"


def _merged(path: Path, existing: dict[str, list[dict[str, Any]]], captions: dict[str, str]) -> str:
    """``metadata.jsonl`` with ``captions``: a file's rows replaced by one row with its new ``text`` (its other
    columns kept from its first row), other rows in their order, new files appended."""
    lines: list[str] = []
    done: set[str] = set()
    for key, rows in existing.items():
        if key in captions:
            lines.append(json.dumps({**rows[0], "text": captions[key]}))
            done.add(key)
        else:
            lines.extend(json.dumps(row) for row in rows)
    lines.extend(json.dumps({"file_name": key, "text": text}) for key, text in captions.items() if key not in done)
    return "".join(line + "\n" for line in lines)


def _parse(line: bytes) -> dict[str, Any] | None:
    try:
        row = json.loads(line.decode("utf-8"))
    except (UnicodeDecodeError, ValueError):
        return None
    return row if isinstance(row, dict) else None
