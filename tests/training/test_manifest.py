"""The checkpoint manifest: every way a file can be damaged is named; foreign pickles are refused unread."""

from __future__ import annotations

import json
import os
import pickle

import pytest
import torch
from safetensors.torch import save_file

from dit_lora.training.manifest import MANIFEST_KEY, UNSAFE_PICKLE, build_manifest, find_unreadable, verify

MARKER = "marker.json"


def _checkpoint(folder, manifest=True):
    folder.mkdir()
    save_file({"w": torch.arange(64, dtype=torch.float32)}, str(folder / "weights.safetensors"))
    torch.save({"state": {0: {"exp_avg": torch.ones(8)}}}, folder / "optimizer.bin")
    (folder / "state.json").write_text(json.dumps({"step": 4}))
    marker = {"step": 4}
    if manifest:
        marker[MANIFEST_KEY] = build_manifest(folder)
    (folder / MARKER).write_text(json.dumps(marker))
    return folder


def test_whole_checkpoint_verifies(tmp_path):
    folder = _checkpoint(tmp_path / "c")
    verdict = verify(folder, MARKER)
    assert verdict.whole and verdict.verified
    assert set(json.loads((folder / MARKER).read_text())[MANIFEST_KEY]) == {"weights.safetensors", "optimizer.bin",
                                                                           "state.json"}


@pytest.mark.parametrize("damage,expected", [
    (lambda f: os.truncate(f / "weights.safetensors", 100), "weights.safetensors is truncated (100 of"),
    (lambda f: (f / "optimizer.bin").unlink(), "optimizer.bin is missing"),
    (lambda f: (f / "state.json").write_text(json.dumps({"step": 40})), "state.json has 12 bytes but was saved with 11"),
    (lambda f: (f / "state.json").write_text(json.dumps({"step": 5})), "state.json does not match the SHA-256"),
])
def test_damage_is_named(tmp_path, damage, expected):
    folder = _checkpoint(tmp_path / "c")
    damage(folder)
    verdict = verify(folder, MARKER)
    assert not verdict.whole and verdict.problem.startswith(expected), verdict.problem


def test_unreadable_marker_and_legacy_marker(tmp_path):
    folder = _checkpoint(tmp_path / "c")
    (folder / MARKER).write_text('{"step": 4, "fi')
    assert "marker.json is unreadable" in verify(folder, MARKER).problem
    legacy = _checkpoint(tmp_path / "legacy", manifest=False)
    verdict = verify(legacy, MARKER)
    assert verdict.whole and not verdict.verified  # resumable, but nothing could be checked


def test_find_unreadable_names_the_file(tmp_path):
    folder = _checkpoint(tmp_path / "c", manifest=False)
    assert find_unreadable(folder) is None
    os.truncate(folder / "weights.safetensors", 100)
    name, reason = find_unreadable(folder)
    assert name == "weights.safetensors" and reason.startswith("is damaged or truncated (SafetensorError")
    os.truncate(folder / "optimizer.bin", 50)  # sorted order: optimizer.bin comes first
    assert find_unreadable(folder)[0] == "optimizer.bin"


class _Payload:
    def __reduce__(self):
        return (os.system, (f"touch {self.target}",))


def test_a_foreign_pickle_is_refused_unread(tmp_path):
    folder = _checkpoint(tmp_path / "c", manifest=False)
    payload = _Payload()
    payload.target = tmp_path / "ran"
    (folder / "optimizer.bin").write_bytes(pickle.dumps(payload))
    name, reason = find_unreadable(folder)
    assert (name, reason) == ("optimizer.bin", UNSAFE_PICKLE)
    assert "weights_only" not in reason and not payload.target.exists()


@pytest.mark.parametrize("error", [FileNotFoundError(2, "No such file or directory"), OSError(5, "Input/output error")])
def test_a_file_that_fails_while_hashed_is_named_damage(tmp_path, monkeypatch, error):
    """A run that prunes the checkpoint while another hashes it (or a failing disk): damage named, no traceback."""
    from dit_lora.training import manifest

    folder = _checkpoint(tmp_path / "c")

    def failing(path):
        raise error

    monkeypatch.setattr(manifest, "sha256_file", failing)
    verdict = verify(folder, MARKER)
    what = "missing" if isinstance(error, FileNotFoundError) else "unreadable"
    assert not verdict.whole and verdict.problem == f"optimizer.bin is {what} ({error.strerror})", verdict.problem
