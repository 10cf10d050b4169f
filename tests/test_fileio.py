"""Full-disk recognition and its one-paragraph error (dit_lora.fileio)."""

from __future__ import annotations

import errno

import pytest

from dit_lora import fileio
from dit_lora.fileio import DiskFullError, is_disk_full, reporting_disk_full


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
