"""A checkpoint's manifest: every file's relative path, size and SHA-256, so a damaged checkpoint is found before
anything loads from it.

:func:`build_manifest` runs when a save has written every file and before the completion marker, which carries
the manifest (the marker is written last and atomically, so it covers every file). :func:`verify` checks a
checkpoint against it: a missing, truncated, resized or changed file is named, and so is a file the manifest
does not list; a malformed manifest makes the checkpoint damaged (``latest`` skips it). Checkpoints of older
dit-lora versions have a marker without a manifest; they are *unverified*, still resumable, and when one fails to
load, :func:`find_unreadable` names the file that does not parse (each read as the loader reads it: safetensors
headers, JSON, and torch's ``weights_only`` loader, which never runs pickled code).
"""

from __future__ import annotations

import hashlib
import json
import pickle
import re
import warnings
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import Any

MANIFEST_KEY = "files"  # in the completion marker: {relative path: {"size": bytes, "sha256": hex}}
_CHUNK = 1 << 20


def sha256_file(path: Path) -> str:
    """Hex SHA-256 of a file, read in 1 MiB chunks."""
    digest = hashlib.sha256()
    with open(path, "rb") as fh:
        for block in iter(lambda: fh.read(_CHUNK), b""):
            digest.update(block)
    return digest.hexdigest()


def build_manifest(folder: Path, exclude: tuple[str, ...] = ()) -> dict[str, dict]:
    """``{relative path: {"size", "sha256"}}`` of every file under ``folder`` but ``exclude`` (the marker)."""
    folder = Path(folder)
    return {
        rel: {"size": (folder / rel).stat().st_size, "sha256": sha256_file(folder / rel)}
        for rel in _files(folder, exclude)
    }


@dataclass
class Verdict:
    """What :func:`verify` found: ``problem`` is None for a whole checkpoint; ``verified`` is False without a
    manifest (a checkpoint of an older dit-lora)."""

    problem: str | None
    verified: bool

    @property
    def whole(self) -> bool:
        """True when nothing is wrong (a checkpoint without a manifest counts as whole: see ``verified``)."""
        return self.problem is None


def verify(folder: Path, marker_name: str) -> Verdict:
    """Check ``folder`` against the manifest in its marker: its structure, then the folder's file list (every
    file listed, every listed file present), sizes (cheap), then hashes. Anything wrong is a named problem."""
    folder = Path(folder)
    try:
        marker = json.loads((folder / marker_name).read_text())
        if not isinstance(marker, dict):
            raise ValueError("not a JSON object")
    except FileNotFoundError:
        return Verdict(f"{marker_name} is missing (the save did not finish)", False)
    except (OSError, ValueError) as err:
        return Verdict(f"its completion marker {marker_name} is unreadable ({type(err).__name__})", False)
    manifest = marker.get(MANIFEST_KEY)
    if manifest is None:
        return Verdict(None, False)
    malformed = manifest_problem(manifest)
    if malformed:  # a marker edited or written by something else: nothing it says can be trusted
        return Verdict(f"its completion marker {marker_name} holds a malformed manifest ({malformed})", True)
    rel = None
    try:
        unlisted = sorted(set(_files(folder, exclude=(marker_name,))) - set(manifest))
        if unlisted:
            return Verdict(f"{unlisted[0]} is not in the manifest (it was added after the save)", True)
        for rel, entry in manifest.items():
            path = folder / rel
            if not path.is_file():
                return Verdict(f"{rel} is missing", True)
            size = path.stat().st_size
            if size < entry["size"]:
                return Verdict(f"{rel} is truncated ({size} of {entry['size']} bytes)", True)
            if size != entry["size"]:
                return Verdict(f"{rel} has {size} bytes but was saved with {entry['size']}", True)
        for rel, entry in manifest.items():
            if sha256_file(folder / rel) != entry["sha256"]:
                return Verdict(
                    f"{rel} does not match the SHA-256 recorded when it was saved (it was changed or replaced since)",
                    True,
                )
    except OSError as err:  # removed, unreadable or failing while checked: damage, named, never a traceback
        what = "missing" if isinstance(err, FileNotFoundError) else "unreadable"
        return Verdict(f"{rel or 'the folder'} is {what} ({err.strerror or type(err).__name__})", True)
    return Verdict(None, True)


_SHA256 = re.compile(r"^[0-9a-f]{64}$")


def manifest_problem(manifest: Any) -> str | None:
    """What is wrong with a manifest's structure (as :func:`build_manifest` writes it), or None.

    Every entry must be a relative path inside the folder with an integer size and a SHA-256 hex digest; an empty
    manifest is malformed too (a save always writes files), or it would vouch for a folder it never saw.
    """
    if not isinstance(manifest, dict):
        return f"`{MANIFEST_KEY}` is a {type(manifest).__name__}, not an object of files"
    if not manifest:
        return "it lists no files"
    for rel, entry in manifest.items():
        parts = PurePosixPath(rel).parts
        if rel.startswith("/") or not parts or ".." in parts or "\\" in rel:
            return f"the file name {rel!r} is not a path inside the checkpoint"
        if not isinstance(entry, dict):
            return f"the entry of {rel} is {str(entry)[:80]!r}, not an object"
        size, digest = entry.get("size"), entry.get("sha256")
        if not isinstance(size, int) or isinstance(size, bool) or size < 0:
            return f"the size of {rel} is {size!r}, not a byte count"
        if not isinstance(digest, str) or not _SHA256.match(digest):
            return f"the sha256 of {rel} is {str(digest)[:80]!r}, not a SHA-256 hex digest"
    return None


def _files(folder: Path, exclude: tuple[str, ...] = ()) -> list[str]:
    """Relative POSIX paths of every regular file under ``folder`` but ``exclude``, sorted."""
    found = []
    for path in sorted(Path(folder).rglob("*")):
        rel = path.relative_to(folder).as_posix()
        if path.is_file() and rel not in exclude:
            found.append(rel)
    return found


def find_unreadable(folder: Path) -> tuple[str, str] | None:
    """The first file of ``folder`` that does not parse as the loader would read it, with the reason; or None.

    ``.bin``/``.pt``/``.pkl`` files go through accelerate's own loader (torch's ``weights_only=True``): a file
    holding other pickled objects is reported as such and never executed.
    """
    from safetensors import safe_open

    for path in sorted(Path(folder).rglob("*")):
        if not path.is_file():
            continue
        rel = path.relative_to(folder).as_posix()
        try:
            if path.suffix == ".safetensors":
                with safe_open(str(path), framework="pt") as fh:
                    fh.keys()
            elif path.suffix == ".json":
                json.loads(path.read_text(encoding="utf-8"))
            elif path.suffix in (".bin", ".pt", ".pkl"):
                from accelerate.utils import load

                with warnings.catch_warnings():  # torch's note on the pickle protocol of accelerate's own files
                    warnings.filterwarnings("ignore", message="Detected pickle protocol")
                    load(str(path), map_location="cpu")
        except pickle.UnpicklingError:
            return rel, UNSAFE_PICKLE
        except Exception as err:
            return rel, f"is damaged or truncated ({type(err).__name__}: {_first_line(err)})"
    return None


# Never the library's advice: torch's text suggests `weights_only=False`, which would run the file's code.
UNSAFE_PICKLE = (
    "holds pickled objects that are not tensors, which no dit-lora checkpoint contains (the file was "
    "replaced); it was refused unread, since dit-lora never unpickles arbitrary objects"
)


def _first_line(err: BaseException) -> str:
    text = str(err).strip().splitlines()
    return (text[0] if text else "")[:200]


__all__ = [
    "MANIFEST_KEY",
    "UNSAFE_PICKLE",
    "Verdict",
    "build_manifest",
    "find_unreadable",
    "manifest_problem",
    "sha256_file",
    "verify",
]
