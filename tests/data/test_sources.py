"""Tests for dit_lora.data: sample discovery, validation of broken files, and transforms.

Every image is built in tmp_path with PIL, so the suite needs no network and runs in seconds.
"""

from __future__ import annotations

import csv
import io
import json
import os
import random

import numpy as np
import pytest
import torch
from PIL import Image

from dit_lora.data import (
    RawSample,
    crop_box,
    crop_seed,
    flip_decision,
    load_samples,
    preprocess_image,
    resized_size,
    validate_samples,
)
from dit_lora.errors import UserError
from data_files import Log, keys, make_image, write_jsonl




def truncated_jpeg_bytes():
    rng = np.random.default_rng(0)
    noise = Image.fromarray(rng.integers(0, 256, (64, 64, 3), dtype=np.uint8))
    buf = io.BytesIO()
    noise.save(buf, format="JPEG", quality=95)
    data = buf.getvalue()
    return data[: len(data) // 2]  # header intact, scan data cut off


# ---------------------------------------------------------------------------------------------
# load_samples: folders
# ---------------------------------------------------------------------------------------------


def test_jsonl_captions(tmp_path):
    make_image(tmp_path / "b.png")
    make_image(tmp_path / "a.jpg", fmt="JPEG")
    write_jsonl(tmp_path / "metadata.jsonl", [
        {"file_name": "b.png", "text": "  a bee  "},
        {"file_name": "a.jpg", "text": "an ant"},
    ])
    samples = load_samples(train_data_dir=tmp_path)
    assert keys(samples) == ["a.jpg", "b.png"]  # sorted, not file order
    assert [s.caption for s in samples] == ["an ant", "a bee"]  # stripped
    assert [s.index for s in samples] == [0, 1]
    assert samples[0].path == str(tmp_path / "a.jpg")


def test_csv_captions_and_custom_caption_column(tmp_path):
    make_image(tmp_path / "x.png")
    make_image(tmp_path / "y.png")
    with open(tmp_path / "metadata.csv", "w", newline="", encoding="utf-8") as f:
        writer = csv.writer(f)
        writer.writerow(["file_name", "prompt"])
        writer.writerow(["x.png", "ex, with a comma"])
        writer.writerow(["y.png", "why"])
    samples = load_samples(train_data_dir=tmp_path, caption_column="prompt")
    assert [(s.key, s.caption) for s in samples] == [("x.png", "ex, with a comma"), ("y.png", "why")]


def test_txt_captions(tmp_path):
    make_image(tmp_path / "one.png")
    make_image(tmp_path / "two.WEBP", fmt="WEBP")  # extension match is case-insensitive
    (tmp_path / "one.txt").write_text("\n  first caption \n")
    (tmp_path / "two.txt").write_text("second")
    (tmp_path / "notes.md").write_text("ignored")
    samples = load_samples(train_data_dir=tmp_path)
    assert [(s.key, s.caption) for s in samples] == [("one.png", "first caption"), ("two.WEBP", "second")]


def test_missing_caption_column_names_columns_and_flag(tmp_path):
    make_image(tmp_path / "a.png")
    write_jsonl(tmp_path / "metadata.jsonl", [{"file_name": "a.png", "caption": "hi", "score": 3}])
    with pytest.raises(UserError) as err:
        load_samples(train_data_dir=tmp_path)
    msg = str(err.value)
    assert "'text'" in msg and "'file_name'" in msg and "'caption'" in msg and "'score'" in msg
    assert "--caption_column" in msg and "metadata.jsonl" in msg
    assert "--caption_column caption" in msg  # suggests the likely column


def test_nested_subfolders_metadata_relative_to_its_folder(tmp_path):
    make_image(tmp_path / "top.png")
    (tmp_path / "top.txt").write_text("top")
    make_image(tmp_path / "sub" / "deep" / "d.png")
    write_jsonl(tmp_path / "sub" / "metadata.jsonl", [{"file_name": "deep/d.png", "text": "deep one"}])
    make_image(tmp_path / "other" / "o.jpeg", fmt="JPEG")
    (tmp_path / "other" / "o.txt").write_text("other")
    make_image(tmp_path / ".hidden" / "h.png")  # hidden folders are skipped, like `datasets` does
    samples = load_samples(train_data_dir=tmp_path)
    assert [(s.key, s.caption) for s in samples] == [
        ("other/o.jpeg", "other"),
        ("sub/deep/d.png", "deep one"),
        ("top.png", "top"),
    ]
    assert samples[1].path == os.path.join(str(tmp_path), "sub", "deep", "d.png")


def test_metadata_wins_over_txt(tmp_path):
    make_image(tmp_path / "a.png")
    (tmp_path / "a.txt").write_text("from txt")
    make_image(tmp_path / "b.png")
    (tmp_path / "b.txt").write_text("b from txt")
    write_jsonl(tmp_path / "metadata.jsonl", [{"file_name": "a.png", "text": "from metadata"}])
    samples = load_samples(train_data_dir=tmp_path)
    # a.png is listed in metadata, b.png is not and falls back to its .txt
    assert [(s.key, s.caption) for s in samples] == [("a.png", "from metadata"), ("b.png", "b from txt")]


def test_images_without_caption_error_lists_files_and_fix(tmp_path):
    for i in range(7):
        make_image(tmp_path / f"img{i}.png")
    (tmp_path / "img0.txt").write_text("captioned")
    with pytest.raises(UserError) as err:
        load_samples(train_data_dir=tmp_path)
    msg = str(err.value)
    assert "6 image(s)" in msg and "img1.png" in msg and "img5.png" in msg
    assert "img6.png" not in msg and "1 more" in msg  # at most 5 named
    assert "metadata.jsonl" in msg and ".txt" in msg


def test_source_flags_exactly_one(tmp_path):
    with pytest.raises(UserError, match="--train_data_dir.*--dataset_name.*neither"):
        load_samples()
    with pytest.raises(UserError, match="--train_data_dir.*--dataset_name.*both"):
        load_samples(train_data_dir=tmp_path, dataset_name="x/y")


def test_missing_dir_file_and_empty_dir(tmp_path):
    missing = tmp_path / "nope"
    with pytest.raises(UserError, match="--train_data_dir") as err:
        load_samples(train_data_dir=missing)
    assert str(missing) in str(err.value) and "does not exist" in str(err.value)

    a_file = tmp_path / "file.txt"
    a_file.write_text("x")
    with pytest.raises(UserError, match="not a folder"):
        load_samples(train_data_dir=a_file)

    empty = tmp_path / "empty"
    (empty / "sub").mkdir(parents=True)
    (empty / "readme.txt").write_text("no images here")
    with pytest.raises(UserError, match="contains no images") as err:
        load_samples(train_data_dir=empty)
    assert "--train_data_dir" in str(err.value)


def test_max_train_samples_truncates_deterministically(tmp_path):
    rows = []
    for i in reversed(range(6)):
        make_image(tmp_path / f"{i:02d}.png")
        rows.append({"file_name": f"{i:02d}.png", "text": str(i)})
    write_jsonl(tmp_path / "metadata.jsonl", rows)
    first = load_samples(train_data_dir=tmp_path, max_train_samples=3)
    assert keys(first) == ["00.png", "01.png", "02.png"]
    assert first == load_samples(train_data_dir=tmp_path, max_train_samples=3)
    with pytest.raises(UserError, match="--max_train_samples"):
        load_samples(train_data_dir=tmp_path, max_train_samples=0)


def test_invalid_jsonl_line_names_file_and_line(tmp_path):
    make_image(tmp_path / "a.png")
    (tmp_path / "metadata.jsonl").write_text('{"file_name": "a.png", "text": "ok"}\n{oops\n')
    with pytest.raises(UserError, match=r"metadata.jsonl line 2"):
        load_samples(train_data_dir=tmp_path)


def test_file_names_leaving_the_folder_are_quarantined_and_never_opened(tmp_path, monkeypatch):
    data = tmp_path / "data"
    make_image(data / "a.png")
    make_image(tmp_path / "outside" / "secret.png", color=(0, 0, 255))
    (tmp_path / "outside" / "secret.txt").write_text("a caption from outside")
    write_jsonl(data / "metadata.jsonl", [
        {"file_name": "a.png", "text": "red"},
        {"file_name": "../outside/secret.png", "text": "secret"},
        {"file_name": "../../../../etc/hostname", "text": "host"},
        {"file_name": str(tmp_path / "outside" / "secret.png"), "text": "absolute"},
        {"file_name": "../outside/secret.png", "text": None},  # no caption: the .txt beside it is not read
    ])
    opened = []
    real_open = Image.open
    monkeypatch.setattr(Image, "open", lambda fp, *a, **k: opened.append(str(fp)) or real_open(fp, *a, **k))
    samples = load_samples(train_data_dir=data)
    refused = [s for s in samples if s.refused]
    assert [s.key for s in refused] == ["../../../../etc/hostname", "../outside/secret.png", "../outside/secret.png",
                                        str(tmp_path / "outside" / "secret.png")]
    assert all(s.path is None for s in refused)
    assert "a caption from outside" not in [s.caption for s in samples]
    log, quarantine = Log(), []
    good = validate_samples(samples, log=log, quarantine=quarantine, max_bad_samples_fraction=1.0,
                            require_captions=False, num_workers=1)
    assert keys(good) == ["a.png"]
    assert opened == [str(data / "a.png")]  # nothing outside the folder was opened
    reasons = {q["key"]: q["reason"] for q in quarantine}
    assert [q["reason"][:25] for q in quarantine if q["key"] == "../outside/secret.png"] == [
        "metadata.jsonl line 2: fi", "metadata.jsonl line 5: fi"]  # each row with its own line
    assert reasons["../outside/secret.png"].startswith(
        f"metadata.jsonl line 5: file_name '../outside/secret.png' leaves the data folder {data}")
    assert "refused, never opened" in reasons["../../../../etc/hostname"]
    assert "symlink" in log.text
    with pytest.raises(ValueError, match="leaves the data folder"):
        refused[0].open_image()  # whoever asks, the file is not opened
    with pytest.raises(ValueError, match="leaves the data folder"):
        refused[0].content_id()


def test_absolute_file_name_inside_the_folder_is_accepted_and_symlinks_are_followed(tmp_path):
    data = tmp_path / "data"
    make_image(data / "a.png")
    other_disk = tmp_path / "disk"
    make_image(other_disk / "b.png", color=(0, 255, 0))
    os.symlink(other_disk, data / "linked")
    (tmp_path / "sub").mkdir()
    write_jsonl(data / "metadata.jsonl", [
        {"file_name": str(data / "a.png"), "text": "absolute, inside"},
        {"file_name": "linked/b.png", "text": "through a link to another disk"},
    ])
    samples = load_samples(train_data_dir=data)
    assert [(s.key, s.caption, s.refused) for s in samples] == [
        ("a.png", "absolute, inside", None), ("linked/b.png", "through a link to another disk", None)]
    assert validate_samples(samples, log=Log(), num_workers=1) == samples  # both decode


def test_csv_file_name_outside_is_refused_too(tmp_path):
    data = tmp_path / "data"
    make_image(data / "sub" / "a.png")
    make_image(tmp_path / "b.png")
    with open(data / "sub" / "metadata.csv", "w", newline="") as handle:
        csv.writer(handle).writerows([["file_name", "text"], ["a.png", "x"], ["../../b.png", "y"], ["../a.png", "z"]])
    samples = {s.key: s for s in load_samples(train_data_dir=data)}
    assert samples["sub/a.png"].refused is None and samples["a.png"].refused is None  # ../ inside the data folder
    assert samples["../../b.png"].refused.startswith("sub/metadata.csv line 3: file_name '../../b.png' leaves")


# ---------------------------------------------------------------------------------------------
# validate_samples: broken files
# ---------------------------------------------------------------------------------------------


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


# ---------------------------------------------------------------------------------------------
# RawSample
# ---------------------------------------------------------------------------------------------


def test_open_image_exif_orientation_and_alpha(tmp_path):
    # Stored 20 wide x 10 tall, left half red; orientation 6 means "rotate 90 degrees clockwise to view".
    img = Image.new("RGB", (20, 10), (0, 0, 255))
    img.paste((255, 0, 0), (0, 0, 10, 10))
    exif = Image.Exif()
    exif[0x0112] = 6
    img.save(tmp_path / "rot.jpg", exif=exif.tobytes(), quality=100)
    rgba = Image.new("RGBA", (4, 4), (0, 0, 0, 0))
    rgba.save(tmp_path / "clear.png")
    sample = RawSample(key="rot.jpg", caption="c", path=str(tmp_path / "rot.jpg"))
    out = sample.open_image()
    assert out.mode == "RGB" and out.size == (10, 20)
    top, bottom = out.getpixel((5, 2)), out.getpixel((5, 17))
    assert top[0] > 200 and top[2] < 60  # the red half ends up on top after the clockwise turn
    assert bottom[2] > 200 and bottom[0] < 60
    clear = RawSample(key="clear.png", caption="c", path=str(tmp_path / "clear.png")).open_image()
    assert clear.getpixel((0, 0)) == (255, 255, 255)  # transparent -> white, not black


def test_content_id_depends_on_bytes_and_caption_not_path(tmp_path):
    make_image(tmp_path / "a.png", color=(1, 2, 3))
    make_image(tmp_path / "copy" / "b.png", color=(1, 2, 3))
    make_image(tmp_path / "c.png", color=(9, 9, 9))
    ids = {
        name: RawSample(key=name, caption=cap, path=str(tmp_path / name)).content_id()
        for name, cap in [("a.png", "cap"), ("copy/b.png", "cap"), ("c.png", "cap")]
    }
    assert ids["a.png"] == ids["copy/b.png"] != ids["c.png"]
    assert RawSample(key="a", caption="other", path=str(tmp_path / "a.png")).content_id() != ids["a.png"]
    assert len(ids["a.png"]) == 64


# ---------------------------------------------------------------------------------------------
# transforms
# ---------------------------------------------------------------------------------------------


def test_preprocess_shape_dtype_range():
    rng = np.random.default_rng(1)
    img = Image.fromarray(rng.integers(0, 256, (30, 50, 3), dtype=np.uint8))
    out = preprocess_image(img, 16, center_crop=True, flip=False, crop_rng_seed=0)
    assert out.shape == (3, 16, 16) and out.dtype == torch.float32 and out.is_contiguous()
    assert out.min() >= -1.0 and out.max() <= 1.0
    black = preprocess_image(Image.new("RGB", (8, 8)), 8, center_crop=True, flip=False, crop_rng_seed=0)
    white = preprocess_image(Image.new("L", (8, 8), 255), 8, center_crop=True, flip=False, crop_rng_seed=0)
    assert torch.all(black == -1.0) and torch.all(white == 1.0)
    tall = preprocess_image(img, (24, 12), center_crop=False, flip=False, crop_rng_seed=3)
    assert tall.shape == (3, 24, 12)
    with pytest.raises(UserError, match="--resolution"):
        preprocess_image(img, 0, center_crop=True, flip=False, crop_rng_seed=0)


def test_resize_matches_torchvision_rule():
    # torchvision Resize(256) on PIL: short side -> 256, long side int(256 * long / short)
    assert resized_size(640, 480, 256) == (341, 256)
    assert resized_size(480, 640, 256) == (256, 341)
    assert resized_size(100, 100, 64) == (64, 64)
    # non-square targets: scale so both sides cover
    assert resized_size(100, 100, (64, 32)) == (64, 64)
    assert resized_size(400, 100, (50, 100)) == (200, 50)
    # the pixels are PIL's plain bilinear resize, the call torchvision makes
    rng = np.random.default_rng(2)
    img = Image.fromarray(rng.integers(0, 256, (40, 60, 3), dtype=np.uint8))
    ref = np.asarray(img.resize((30, 20), Image.BILINEAR).crop((5, 0, 25, 20)), dtype=np.float32)
    out = preprocess_image(img, 20, center_crop=True, flip=False, crop_rng_seed=0)
    assert torch.allclose(out, torch.from_numpy(ref).permute(2, 0, 1) / 127.5 - 1)


def test_center_crop_takes_the_center():
    # 30x10 image: white 10x10 square in the middle, black sides. Center crop to 10 = pure white.
    img = Image.new("RGB", (30, 10), (0, 0, 0))
    img.paste((255, 255, 255), (10, 0, 20, 10))
    out = preprocess_image(img, 10, center_crop=True, flip=False, crop_rng_seed=0)
    assert torch.all(out == 1.0)
    assert crop_box((30, 10), 10, center_crop=True, crop_rng_seed=0) == (10, 0, 20, 10)


def test_flip_mirrors():
    arr = np.zeros((8, 8, 3), dtype=np.uint8)
    arr[:, :2] = 255  # white stripe on the left
    img = Image.fromarray(arr)
    plain = preprocess_image(img, 8, center_crop=True, flip=False, crop_rng_seed=0)
    flipped = preprocess_image(img, 8, center_crop=True, flip=True, crop_rng_seed=0)
    assert torch.equal(flipped, plain.flip(-1))
    assert torch.all(flipped[:, :, -2:] == 1.0) and torch.all(flipped[:, :, :-2] == -1.0)


def test_random_crop_deterministic_per_seed():
    # 64 wide x 16 tall: the resize to 16 keeps it 64x16, so the crop can slide 0..48 horizontally.
    rng = np.random.default_rng(3)
    img = Image.fromarray(rng.integers(0, 256, (16, 64, 3), dtype=np.uint8))

    def crop(seed):
        return preprocess_image(img, 16, center_crop=False, flip=False, crop_rng_seed=seed)

    assert torch.equal(crop(7), crop(7))
    boxes = {crop_box((64, 16), 16, center_crop=False, crop_rng_seed=s) for s in range(20)}
    assert len(boxes) > 10  # different seeds give different crops
    assert all(0 <= left <= 48 and top == 0 for left, top, _, _ in boxes)
    left = crop_box((64, 16), 16, center_crop=False, crop_rng_seed=7)[0]
    expected = np.asarray(img, dtype=np.float32)[:, left : left + 16]
    assert torch.equal(crop(7), torch.from_numpy(expected).permute(2, 0, 1) / 127.5 - 1)
    assert sum(not torch.equal(crop(7), crop(s)) for s in range(8, 14)) >= 5


def test_flip_decision_and_crop_seed_are_pure():
    torch_state, py_state, np_state = torch.random.get_rng_state(), random.getstate(), np.random.get_state()
    draws = [flip_decision(1234, epoch, i) for epoch in range(2) for i in range(500)]
    assert draws == [flip_decision(1234, epoch, i) for epoch in range(2) for i in range(500)]
    assert 400 <= sum(draws) <= 600
    assert draws[:500] != draws[500:]  # a sample is not flipped the same way every epoch
    assert draws != [flip_decision(99, epoch, i) for epoch in range(2) for i in range(500)]
    assert crop_seed(1, "a.png") == crop_seed(1, "a.png")
    assert len({crop_seed(1, "a.png"), crop_seed(2, "a.png"), crop_seed(1, "b.png")}) == 3
    assert torch.equal(torch.random.get_rng_state(), torch_state)
    assert random.getstate() == py_state
    assert all(np.array_equal(a, b) if isinstance(a, np.ndarray) else a == b
               for a, b in zip(np.random.get_state(), np_state))


def test_every_sample_kind_names_itself_for_fault_reports_and_only_clips_have_a_bucket():
    from pathlib import Path

    from dit_lora.data.video import VideoSample
    from dit_lora.families.videochat.data import QASample

    assert RawSample(key="cat.png", caption="a cat", path="/data/cat.png").display_name() == "/data/cat.png"
    assert RawSample(key="ds[3]", caption="a cat").display_name() == "ds[3]"  # a dataset row has no file
    assert VideoSample(key="a.mp4", caption="", path="/clips/a.mp4").display_name() == "/clips/a.mp4"
    assert QASample("qa.json:2", Path("/clips/a.mp4"), []).display_name() == "qa.json:2 (/clips/a.mp4)"
    assert RawSample(key="cat.png", caption="").bucket is None
    assert VideoSample(key="a.mp4", caption="", path="a.mp4", bucket=(9, 32, 32)).bucket == (9, 32, 32)


def test_refused_rows_are_named_as_written_on_their_own_line_once_each(tmp_path):
    # Review finding I: two rows reaching the same outside file were both reported as the first, with its line;
    # a NUL in a name reached the log raw; the count called refused paths "unreadable images".
    data = tmp_path / "data"
    make_image(data / "a.png")
    make_image(tmp_path / "outside" / "secret.png")
    rows = [json.dumps({"file_name": "a.png", "text": "x"}), "", "",
            json.dumps({"file_name": "../outside/secret.png", "text": "x"}), "",
            json.dumps({"file_name": "inner/../../outside/secret.png", "text": "x"}),
            json.dumps({"file_name": "/etc\x00/hostname", "text": "x"}),
            json.dumps({"file_name": "missing.png", "text": "x"})]
    (data / "metadata.jsonl").write_text("\n".join(rows) + "\n")
    log, quarantine = Log(), []
    validate_samples(load_samples(train_data_dir=data), log=log, quarantine=quarantine, max_bad_samples_fraction=1.0,
                     num_workers=1)
    reasons = {q["key"]: q["reason"] for q in quarantine}
    assert len(quarantine) == 4 and len(reasons) == 4
    assert reasons["../outside/secret.png"].startswith("metadata.jsonl line 4: file_name '../outside/secret.png' ")
    assert reasons["inner/../../outside/secret.png"].startswith(
        "metadata.jsonl line 6: file_name 'inner/../../outside/secret.png' ")
    assert reasons["/etc\\x00/hostname"].startswith("metadata.jsonl line 7: file_name '/etc\\x00/hostname' ")
    assert "\x00" not in log.text and "skipping /etc\\x00/hostname: " in log.text
    assert log[-1] == "skipped 4 of 5 samples: 3 paths outside the data folder, 1 unreadable image; 1 remain"


def test_csv_refused_row_names_its_true_line(tmp_path):
    data = tmp_path / "data"
    make_image(data / "a.png")
    (data / "metadata.csv").write_text('file_name,text\na.png,"two\nlines"\n\n../b.png,y\n')
    (refused,) = [s for s in load_samples(train_data_dir=data) if s.refused]
    assert refused.refused.startswith("metadata.csv line 5: file_name '../b.png' leaves")
