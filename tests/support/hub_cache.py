"""A Hugging Face Hub cache made by hand: a model folder laid out as huggingface_hub lays a download out
(``models--org--name/snapshots/<commit>/``, ``refs/main``), so offline code finds a Hub id in it as it would after
``hf download``. :func:`use_cache` points this process's huggingface_hub at such a cache (its constant is read
when a download function runs; the environment variable is set too, for messages and subprocesses)."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

#: the commit every hand-made snapshot is stored under (any 40 hex digits do)
COMMIT = "0123456789abcdef0123456789abcdef01234567"


def put_in_cache(cache: Path, repo_id: str, folder: Path, commit: str = COMMIT) -> Path:
    """Copy ``folder`` into ``cache`` as the snapshot of ``repo_id`` at ``commit`` (its ``main``); returns the
    snapshot folder."""
    repo = cache / ("models--" + repo_id.replace("/", "--"))
    snapshot = repo / "snapshots" / commit
    shutil.copytree(folder, snapshot)
    (repo / "refs").mkdir(parents=True, exist_ok=True)
    (repo / "refs" / "main").write_text(commit)
    return snapshot


def use_cache(monkeypatch: pytest.MonkeyPatch, cache: Path) -> None:
    """This process's huggingface_hub reads and writes ``cache`` (and forgets the Hub ids dit-lora resolved)."""
    from huggingface_hub import constants

    from dit_lora.modelfiles import hub_snapshot

    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(cache))
    monkeypatch.setenv("HF_HUB_CACHE", str(cache))
    monkeypatch.setattr(hub_snapshot, "_RESOLVED", {})
