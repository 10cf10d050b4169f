"""data/validation.py: broken image files are skipped and named, and too many of them stop the run."""

from __future__ import annotations

import io
import random

import numpy as np
import pytest
from PIL import Image

from dit_lora.data import RawSample, load_samples, validate_samples
from dit_lora.core.errors import UserError
from data_files import Log, keys, make_image, write_jsonl


def truncated_jpeg_bytes():
    rng = np.random.default_rng(0)
    noise = Image.fromarray(rng.integers(0, 256, (64, 64, 3), dtype=np.uint8))
    buf = io.BytesIO()
    noise.save(buf, format="JPEG", quality=95)
    data = buf.getvalue()
    return data[: len(data) // 2]  # header intact, scan data cut off



@pytest.fixture
def messy_dir(tmp_path):
    """4 good images and 5 broken ones of different kinds, all captioned via metadata.jsonl."""
    rows = []
    for i in range(4):
        make_image(tmp_path / f"good{i}.png", color=(i * 60, 0, 0))
        rows.append({"file_name": f"good{i}.png", "text": f"good {i}"})
    (tmp_path / "corrupt.png").write_bytes(random.Random(0).randbytes(300))
    (tmp_path / "empty.jpg").write_bytes(b"")
    (tmp_path / "truncated.jpg").write_bytes(truncated_jpeg_bytes())
    png = io.BytesIO()
    Image.new("RGB", (32, 32), (1, 2, 3)).save(png, format="PNG")
    data = bytearray(png.getvalue())
    data[60:] = bytes(len(data) - 60)  # valid signature and header, garbage compressed data
    (tmp_path / "badbody.png").write_bytes(bytes(data))
    for name in ("corrupt.png", "empty.jpg", "truncated.jpg", "badbody.png", "missing.png"):
        rows.append({"file_name": name, "text": name})
    write_jsonl(tmp_path / "metadata.jsonl", rows)
    return tmp_path


def test_bad_files_skipped_and_named(messy_dir):
    samples = load_samples(train_data_dir=messy_dir)
    assert "missing.png" in keys(samples)  # a metadata row for a missing file is a sample, not a crash
    log = Log()
    good = validate_samples(samples, max_bad_samples_fraction=0.6, log=log)
    assert keys(good) == [f"good{i}.png" for i in range(4)]
    assert [s.index for s in good] == [0, 1, 2, 3]  # renumbered
    lines = {line.split(":")[0]: line for line in log if line.startswith("skipping ")}
    assert set(lines) == {f"skipping {n}" for n in
                          ("badbody.png", "corrupt.png", "empty.jpg", "missing.png", "truncated.jpg")}
    assert "file not found" in lines["skipping missing.png"]
    assert "0 bytes" in lines["skipping empty.jpg"]
    assert "truncated" in lines["skipping truncated.jpg"]
    assert "not a readable image" in lines["skipping corrupt.png"]
    assert "skipped 5 of 9" in log.text
    # single-threaded path gives the same answer
    assert validate_samples(samples, max_bad_samples_fraction=0.6, log=Log(), num_workers=1) == good


def test_bad_fraction_exceeded(messy_dir):
    samples = load_samples(train_data_dir=messy_dir)
    with pytest.raises(UserError) as err:
        validate_samples(samples, log=Log())  # default 5%
    msg = str(err.value)
    assert "--max_bad_samples_fraction" in msg and "5 of 9" in msg
    assert "corrupt.png" in msg and "missing.png" in msg
    # the suggested value really admits the data
    suggested = float(msg.split("at least ")[1].split(" ")[0])
    assert len(validate_samples(samples, max_bad_samples_fraction=suggested, log=Log())) == 4


def test_nothing_left_and_long_logs_capped(tmp_path):
    samples = [RawSample(key=f"gone{i}.png", caption="x", path=str(tmp_path / f"gone{i}.png"), index=i)
               for i in range(25)]
    log = Log()
    with pytest.raises(UserError, match="None of the 25"):
        validate_samples(samples, max_bad_samples_fraction=1.0, log=log)
    assert sum(line.startswith("skipping ") for line in log) == 20
    assert "... and 5 more" in log
    with pytest.raises(UserError, match="No training samples"):
        validate_samples([], log=log)


def test_kohya_repeats_are_decoded_quarantined_and_counted_once(tmp_path, monkeypatch):
    """A `10_sks/` folder lists each image 10 times: each file is decoded once, a bad one is named and quarantined
    once with its count, and the bad fraction counts files (1 of 3), not copies (10 of 21)."""
    make_image(tmp_path / "10_sks" / "good.png")
    (tmp_path / "10_sks" / "bad.png").write_bytes(b"not an image")
    make_image(tmp_path / "plain" / "other.png")
    for name in ("10_sks/good", "10_sks/bad", "plain/other"):
        (tmp_path / f"{name}.txt").write_text("a photo")
    samples = load_samples(train_data_dir=tmp_path, log=Log())
    assert len(samples) == 21
    opened: list[str] = []
    real = RawSample.open_image
    monkeypatch.setattr(RawSample, "open_image", lambda self, **kw: opened.append(self.key) or real(self, **kw))
    log, quarantine = Log(), []
    good = validate_samples(samples, max_bad_samples_fraction=0.5, log=log, quarantine=quarantine, num_workers=1)
    assert sorted(opened) == ["10_sks/bad.png", "10_sks/good.png", "plain/other.png"]
    assert len(good) == 11 and [s.index for s in good] == list(range(11))
    assert quarantine == [{"key": "10_sks/bad.png", "reason": quarantine[0]["reason"], "repeats": 10}]
    skipped = [line for line in log if line.startswith("skipping ")]
    assert len(skipped) == 1 and skipped[0].endswith("(listed 10 times: kohya N_words/ repeats)")
    assert "skipped 1 of 3 files (10 of 21 samples per epoch with repeats)" in log.text
    with pytest.raises(UserError) as err:
        validate_samples(samples, max_bad_samples_fraction=0.3, log=Log())
    assert "1 of 3 training images (files; their repeats are not counted) (33.3%)" in str(err.value)
