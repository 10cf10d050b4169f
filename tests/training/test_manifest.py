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


def _set_manifest(folder, change):
    marker = json.loads((folder / MARKER).read_text())
    change(marker[MANIFEST_KEY])
    (folder / MARKER).write_text(json.dumps(marker))


@pytest.mark.parametrize("change,expected", [
    (lambda m: m.clear(), "it lists no files"),
    (lambda m: m.update({"state.json": 7}), "the entry of state.json is '7', not an object"),
    (lambda m: m["state.json"].update(size="x"), "the size of state.json is 'x', not a byte count"),
    (lambda m: m["state.json"].update(size=True), "the size of state.json is True, not a byte count"),
    (lambda m: m["state.json"].pop("sha256"), "the sha256 of state.json is 'None', not a SHA-256 hex digest"),
    (lambda m: m.update({"../outside.json": m["state.json"]}),
     "the file name '../outside.json' is not a path inside the checkpoint"),
])
def test_a_malformed_manifest_is_named_damage(tmp_path, change, expected):
    """A marker whose manifest is not what build_manifest writes: damage (skipped by `latest`), never a traceback;
    an empty one no longer vouches for every file."""
    folder = _checkpoint(tmp_path / "c")
    _set_manifest(folder, change)
    verdict = verify(folder, MARKER)
    assert not verdict.whole and verdict.problem == f"its completion marker {MARKER} holds a malformed manifest " \
                                                    f"({expected})", verdict.problem


def test_a_manifest_that_is_not_an_object_is_named_damage(tmp_path):
    folder = _checkpoint(tmp_path / "c")
    marker = json.loads((folder / MARKER).read_text())
    (folder / MARKER).write_text(json.dumps({**marker, MANIFEST_KEY: [1, 2]}))
    assert verify(folder, MARKER).problem == (f"its completion marker {MARKER} holds a malformed manifest "
                                              f"(`{MANIFEST_KEY}` is a list, not an object of files)")


def test_files_missing_from_the_manifest_or_the_folder_are_named(tmp_path):
    folder = _checkpoint(tmp_path / "c")
    (folder / "sub").mkdir()
    (folder / "sub" / "extra.bin").write_bytes(b"x")
    assert verify(folder, MARKER).problem == "sub/extra.bin is not in the manifest (it was added after the save)"
    (folder / "sub" / "extra.bin").unlink()
    assert verify(folder, MARKER).whole
    _set_manifest(folder, lambda m: m.pop("optimizer.bin"))
    assert verify(folder, MARKER).problem.startswith("optimizer.bin is not in the manifest")
    folder = _checkpoint(tmp_path / "d")
    _set_manifest(folder, lambda m: m.update({"more.json": m["state.json"]}))
    assert verify(folder, MARKER).problem == "more.json is missing"
