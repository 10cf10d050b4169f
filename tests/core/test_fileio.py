"""Full-disk recognition and its one-paragraph error (dit_lora.core.fileio)."""

from __future__ import annotations

import errno

import pytest

from dit_lora.core import fileio
from dit_lora.core.fileio import DiskFullError, is_disk_full, reporting_disk_full


def test_is_disk_full_recognises_every_shape(tmp_path, monkeypatch):
    assert is_disk_full(OSError(errno.ENOSPC, "No space left on device"))
    assert is_disk_full(OSError(errno.EDQUOT, "Disk quota exceeded"))
    # safetensors' Rust error keeps only the text
    assert is_disk_full(RuntimeError("Error while serializing: I/O error: No space left on device (os error 28)"))
    chained = RuntimeError("wrapper")
    chained.__cause__ = OSError(errno.ENOSPC, "x")
    assert is_disk_full(chained)
    assert not is_disk_full(OSError(errno.EACCES, "Permission denied"))
    # torch's zip writer loses the errno: a short write counts only when the disk is (nearly) full
    torch_error = RuntimeError("[enforce fail at inline_container.cc:672] . unexpected pos 576 vs 534")
    monkeypatch.setattr(fileio, "free_bytes", lambda where: 4096)
    assert is_disk_full(torch_error, tmp_path, needed=10**6) and not is_disk_full(torch_error)
    monkeypatch.setattr(fileio, "free_bytes", lambda where: 10**12)
    assert not is_disk_full(torch_error, tmp_path, needed=10**6)


def test_reporting_disk_full_is_one_paragraph(tmp_path):
    with pytest.raises(DiskFullError) as info:
        with reporting_disk_full("the adapter", tmp_path, needed=38_432, advice=lambda: "Do this."):
            raise OSError(errno.ENOSPC, "No space left on device")
    text = str(info.value)
    assert text.startswith(f"No space left on device while writing the adapter to {tmp_path}. It needs about 38.4 KB;")
    assert text.endswith("are free on that file system (a disk quota may allow less). Do this.")
    with pytest.raises(ValueError):  # anything else passes unchanged
        with reporting_disk_full("x", tmp_path):
            raise ValueError("other")


def test_human_bytes():
    assert [fileio.human_bytes(n) for n in (0, 999, 38_432, 5 * 10**9)] == ["0 bytes", "999 bytes", "38.4 KB",
                                                                            "5.0 GB"]


@pytest.fixture
def read_only_folder(tmp_path):
    """A read-only tmpfs (root ignores chmod, not a read-only mount)."""
    import subprocess

    folder = tmp_path / "ro"
    folder.mkdir()
    mounted = subprocess.run(["mount", "-t", "tmpfs", "-o", "ro", "tmpfs", str(folder)], capture_output=True)
    if mounted.returncode != 0:
        pytest.skip(f"cannot mount a read-only tmpfs here ({mounted.stderr.decode().strip()}): needs root")
    yield folder
    subprocess.run(["umount", str(folder)], check=True)


def test_a_read_only_folder_is_one_paragraph_naming_the_flag(read_only_folder, tmp_path):
    from dit_lora.core.errors import UserError
    from dit_lora.core.fileio import check_writable

    with pytest.raises(UserError, match=r"`--output_dir .*ro` is not writable \(read-only file system\): choose"):
        check_writable(read_only_folder, "--output_dir")
    with pytest.raises(UserError, match=r"it would be created in .*ro, which refuses new files"):
        check_writable(read_only_folder / "run" / "logs", "--logging_dir")
    check_writable(tmp_path / "new" / "folder", "--cache_dir")  # writable: nothing raised, nothing created
    assert not (tmp_path / "new").exists()


def test_the_run_refuses_a_read_only_cache_before_loading(read_only_folder, tmp_path):
    from dit_lora.config import TrainConfig
    from dit_lora.core.errors import UserError
    from dit_lora.training.run_folders import check_run_folders

    cfg = TrainConfig.for_family("sana", output_dir=str(tmp_path / "out"), cache_dir=str(read_only_folder),
                                 train_data_dir=str(tmp_path / "data"))
    with pytest.raises(UserError, match="--cache_dir"):
        check_run_folders(cfg)
    cfg = TrainConfig.for_family("sana", output_dir=str(read_only_folder), cache_dir=str(tmp_path / "c"),
                                 train_data_dir=str(tmp_path / "data"))
    with pytest.raises(UserError, match="--output_dir"):
        check_run_folders(cfg)


def test_atomic_writes_get_the_umasks_mode_whatever_the_writer_chose(tmp_path, umask):
    """safetensors creates its files 0600; every atomic write ends with the mode the umask gives a new file."""
    import os

    import torch

    assert fileio.default_file_mode() == 0o666 & ~umask
    saved = fileio.save_safetensors_atomic({"a": torch.zeros(1)}, tmp_path / "a.safetensors")
    text = fileio.write_text_atomic(tmp_path / "b.txt", "b")
    private = fileio.atomic_write(tmp_path / "c.bin", lambda tmp: os.close(os.open(tmp, os.O_CREAT | os.O_WRONLY, 0o600)))
    for path in (saved, text, private):
        assert path.stat().st_mode & 0o777 == 0o666 & ~umask, (path.name, oct(path.stat().st_mode))


def test_default_modes_of_a_folder_and_the_umask_without_proc(tmp_path, umask, monkeypatch):
    """give_default_modes reaches every file under a folder; without /proc the umask is read by setting it, and the
    process keeps its own afterwards."""
    import os

    (tmp_path / "sub").mkdir()
    for name in ("a", "sub/b"):
        (tmp_path / name).write_text(name)
        os.chmod(tmp_path / name, 0o600)
    fileio.give_default_modes(tmp_path)
    assert {(tmp_path / n).stat().st_mode & 0o777 for n in ("a", "sub/b")} == {0o666 & ~umask}

    def no_proc(*args, **kwargs):
        raise OSError("no /proc here")

    monkeypatch.setattr(fileio, "open", no_proc, raising=False)
    assert fileio.default_file_mode() == 0o666 & ~umask
    assert os.umask(umask) == umask  # the fallback put the process's umask back


def test_safetensors_metadata_is_rewritten_in_sorted_order(tmp_path):
    """safetensors 0.8 writes its metadata from a Rust HashMap, in another order in each process: the header is
    rewritten sorted, the same length, the tensors untouched; a sorted or metadata-less file is left as it is."""
    import json
    import struct

    import torch
    from safetensors import safe_open
    from safetensors.torch import load_file, save

    tensors = {"b": torch.arange(6.0).reshape(2, 3), "a": torch.ones(3, dtype=torch.bfloat16)}
    data = save(tensors, metadata={"format": "pt", "zeta": 'say "hi"\n', "alpha": "é"})
    (size,) = struct.unpack("<Q", data[:8])
    header = json.loads(data[8 : 8 + size])
    header["__metadata__"] = dict(reversed(sorted(header["__metadata__"].items())))  # what another process may write
    text = json.dumps(header, separators=(",", ":"), ensure_ascii=False).encode()
    shuffled = data[:8] + text + data[8 + len(text) :]
    path = tmp_path / "x.safetensors"
    path.write_bytes(shuffled)
    assert fileio.sort_safetensors_metadata(path)
    rewritten = path.read_bytes()
    assert len(rewritten) == len(data) and rewritten[8 + size :] == data[8 + size :]
    assert list(json.loads(rewritten[8 : 8 + size])["__metadata__"]) == ["alpha", "format", "zeta"]
    assert all(torch.equal(load_file(str(path))[k], v) for k, v in tensors.items())
    with safe_open(str(path), framework="pt") as fh:
        assert fh.metadata() == {"format": "pt", "zeta": 'say "hi"\n', "alpha": "é"}
    assert not fileio.sort_safetensors_metadata(path)  # already sorted
    (tmp_path / "plain.safetensors").write_bytes(save(tensors))
    assert not fileio.sort_safetensors_metadata(tmp_path / "plain.safetensors")
    (tmp_path / "junk.safetensors").write_bytes(b"\x05\x00\x00\x00\x00\x00\x00\x00{nope")
    assert not fileio.sort_safetensors_metadata(tmp_path / "junk.safetensors")
