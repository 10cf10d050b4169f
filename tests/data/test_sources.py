"""Tests for dit_lora.data.sources: sample discovery (folders, captions, data files) and what a sample is.

Every image is built in tmp_path with PIL, so the suite needs no network and runs in seconds. Broken files are
tests/data/test_validation.py's, transforms tests/data/test_transforms.py's.
"""

from __future__ import annotations

import csv
import json
import os

import pytest
from PIL import Image

from dit_lora.data import RawSample, load_samples, validate_samples
from dit_lora.core.errors import UserError
from data_files import Log, keys, make_image, write_jsonl


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
    assert "not followed out of it" in log.text
    with pytest.raises(ValueError, match="leaves the data folder"):
        refused[0].open_image()  # whoever asks, the file is not opened
    with pytest.raises(ValueError, match="leaves the data folder"):
        refused[0].content_id()


def test_absolute_file_name_inside_the_folder_is_accepted_and_a_link_out_of_it_is_refused(tmp_path):
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
    samples = load_samples(train_data_dir=data, log=Log())
    assert [(s.key, s.caption, s.path is None) for s in samples] == [
        ("a.png", "absolute, inside", False), ("linked/b.png", "through a link to another disk", True)]
    assert samples[1].refused.startswith("metadata.jsonl line 2: file_name 'linked/b.png' is reached through a link "
                                         f"that leads out of the data folder {data}")
    quarantine: list = []
    assert validate_samples(samples, log=Log(), quarantine=quarantine, max_bad_samples_fraction=1.0,
                            num_workers=1) == samples[:1]
    assert [q["key"] for q in quarantine] == ["linked/b.png"]


def test_a_link_to_the_parent_inside_the_data_folder_is_left_out_and_said_once(tmp_path):
    """The issue's folder: 4 captioned images and a link to the folder's parent, which holds 6 more: 4 samples, and one
    line naming the link; a file link inside the folder is a sample of its own, said too."""
    parent = tmp_path / "parent"
    data = parent / "data"
    for i in range(4):
        make_image(data / f"{i}.png")
        (data / f"{i}.txt").write_text(f"image {i}")
    for i in range(6):
        make_image(parent / f"other{i}.png")
        (parent / f"other{i}.txt").write_text(f"outside {i}")
    os.symlink(parent, data / "up")
    log = Log()
    samples = load_samples(train_data_dir=data, log=log)
    assert keys(samples) == ["0.png", "1.png", "2.png", "3.png"]
    said = [line for line in log if "lead out of the folder" in line]
    assert said == [f"--train_data_dir {data}: 1 link(s) lead out of the folder or loop and are left out, never opened "
                    f"(e.g. 'up' -> {parent}): links inside a data folder are not followed out of it. Copy those files "
                    f"into the folder, or pass the folder they are in as --train_data_dir"]
    os.symlink(data / "0.png", data / "4.png")
    (data / "4.txt").write_text("a second caption for image 0")
    log = Log()
    samples = load_samples(train_data_dir=data, log=log)
    assert keys(samples) == ["0.png", "1.png", "2.png", "3.png", "4.png"]
    assert not [line for line in log if "lead out" in line]  # said once per folder and process
    assert any("1 file link(s) point to another file of the folder" in line and "4.png" in line for line in log)


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


def test_every_sample_kind_names_itself_for_fault_reports_and_only_clips_have_a_bucket():
    from pathlib import Path

    from dit_lora.data.video import VideoSample
    from dit_lora.families.videollm.data import QASample

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


# ---------------------------------------------------------------------------------------------
# kohya folders, --caption_extension, --instance_prompt
# ---------------------------------------------------------------------------------------------


def _kohya(tmp_path, folder="10_sks dog", n=3, ext=".caption"):
    for i in range(n):
        make_image(tmp_path / folder / f"{i}.png", color=(i * 60, 10, 10))
        if ext:
            (tmp_path / folder / f"{i}{ext}").write_text(f"sks dog number {i}")
    return tmp_path


def test_kohya_folder_repeats_each_image_n_times_sharing_its_cache_entry(tmp_path):
    log = Log()
    samples = load_samples(train_data_dir=_kohya(tmp_path), caption_extension=".caption", log=log)
    assert len(samples) == 30 and [s.index for s in samples] == list(range(30))
    assert keys(samples) == [f"10_sks dog/{i}.png" for i in range(3) for _ in range(10)]
    assert [s.repeat for s in samples[:10]] == list(range(10))
    assert [s.caption for s in samples[::10]] == [f"sks dog number {i}" for i in range(3)]
    assert len({s.cache_key() for s in samples}) == 3  # one cache entry per image: encoded once
    assert "`10_sks dog/`: 3 image(s) x 10 repeats = 30 samples per epoch" in log.text


def test_kohya_folder_beside_a_plain_one_and_max_train_samples_counts_images(tmp_path):
    _kohya(tmp_path, "3_cat", n=2, ext=".txt")
    make_image(tmp_path / "plain" / "p.png")
    (tmp_path / "plain" / "p.txt").write_text("plain")
    log = Log()
    samples = load_samples(train_data_dir=tmp_path, log=log)
    assert keys(samples) == ["3_cat/0.png"] * 3 + ["3_cat/1.png"] * 3 + ["plain/p.png"]
    assert "1 image(s) outside any N_words folder" in log.text
    assert len(load_samples(train_data_dir=tmp_path, max_train_samples=1, log=Log())) == 3


@pytest.mark.parametrize("folder", ["0_sks dog", "2024_trip", "-1_x"])
def test_kohya_folder_with_zero_or_absurd_repeats_is_refused(tmp_path, folder):
    _kohya(tmp_path, folder, n=1, ext=".txt")
    with pytest.raises(UserError) as err:
        load_samples(train_data_dir=tmp_path, log=Log())
    msg = str(err.value)
    assert repr(folder) in msg and "N_words" in msg and "Rename it" in msg


def test_folder_not_read_as_kohya_keeps_one_repeat(tmp_path):
    _kohya(tmp_path, "trip_2024", n=2, ext=".txt")
    samples = load_samples(train_data_dir=tmp_path, log=Log())
    assert keys(samples) == ["trip_2024/0.png", "trip_2024/1.png"]


def test_kohya_words_caption_an_image_without_caption_file(tmp_path):
    _kohya(tmp_path, "5_sks dog", n=2, ext=None)
    (tmp_path / "5_sks dog" / "0.txt").write_text("own caption")
    log = Log()
    samples = load_samples(train_data_dir=tmp_path, log=log)
    assert [s.caption for s in samples[::5]] == ["own caption", "sks dog"]
    assert "`5_sks dog/`: 1 image(s) without a .txt caption are captioned 'sks dog'" in log.text


def test_caption_extension_caption_and_the_other_extension_is_named(tmp_path):
    make_image(tmp_path / "a.png")
    (tmp_path / "a.caption").write_text("from caption file")
    assert load_samples(train_data_dir=tmp_path, caption_extension="caption", log=Log())[0].caption == \
        "from caption file"
    with pytest.raises(UserError) as err:  # default .txt: the .caption file is not read, and said so
        load_samples(train_data_dir=tmp_path, log=Log())
    assert "--caption_extension .caption" in str(err.value)
    make_image(tmp_path / "b.png")
    (tmp_path / "b.txt").write_text("b text")
    (tmp_path / "a.txt").write_text("a text")
    (tmp_path / "b.caption").write_text("unused")
    log = Log()
    assert [s.caption for s in load_samples(train_data_dir=tmp_path, log=log)] == ["a text", "b text"]
    assert "caption file" not in log.text  # the chosen extension was found: no note
    with pytest.raises(UserError, match="--caption_extension"):
        load_samples(train_data_dir=tmp_path, caption_extension=".", log=Log())


def test_instance_prompt_captions_every_image_and_says_so(tmp_path):
    _kohya(tmp_path, "2_sks dog", n=2, ext=".txt")
    make_image(tmp_path / "x.png")
    log = Log()
    samples = load_samples(train_data_dir=tmp_path, instance_prompt=" a photo of sks dog ", log=log)
    assert len(samples) == 5 and {s.caption for s in samples} == {"a photo of sks dog"}
    assert "--instance_prompt: all 3 image(s)" in log.text and "not read" in log.text
    with pytest.raises(UserError, match="--instance_prompt is empty"):
        load_samples(train_data_dir=tmp_path, instance_prompt="  ", log=Log())


def test_multi_line_caption_files_are_read_whole_and_named_once(tmp_path):
    make_image(tmp_path / "a.png")
    make_image(tmp_path / "sub" / "b.png")
    make_image(tmp_path / "c.png")
    (tmp_path / "a.txt").write_text("a red car\nparked outside\n")
    (tmp_path / "sub" / "b.txt").write_text("line one\r\nline two")
    (tmp_path / "c.txt").write_text("  one line only \n")
    log = Log()
    samples = load_samples(train_data_dir=tmp_path, log=log)
    # dit-lora trains on the whole file (as musubi-tuner does), line breaks included; kohya would take line one
    assert [(s.key, s.caption) for s in samples] == [("a.png", "a red car\nparked outside"),
                                                     ("c.png", "one line only"), ("sub/b.png", "line one\nline two")]
    said = [line for line in log if "caption file(s) hold more than one line" in line]
    assert said == ["2 caption file(s) hold more than one line: the whole file is each caption, line breaks included "
                    "(kohya's sd-scripts read the first line only; musubi-tuner reads the whole file too): "
                    "a.txt, sub/b.txt"]
    quiet = Log()
    (tmp_path / "a.txt").write_text("one line")
    (tmp_path / "sub" / "b.txt").write_text("one line")
    load_samples(train_data_dir=tmp_path, log=quiet)
    assert not any("more than one line" in line for line in quiet)


def test_caption_files_shadowed_by_metadata_are_named_once(tmp_path):
    # metadata wins over the .txt beside an image; a SimpleTuner user expects the .txt: the log says it is not read
    from data_files import Log, make_image

    for name in ("a", "b", "c"):
        make_image(tmp_path / f"{name}.png")
        (tmp_path / f"{name}.txt").write_text(f"txt {name}")
    (tmp_path / "metadata.jsonl").write_text('{"file_name": "a.png", "text": "META a"}\n'
                                             '{"file_name": "b.png", "text": "META b"}\n')
    log = Log()
    samples = load_samples(train_data_dir=tmp_path, log=log)
    assert [s.caption for s in samples] == ["META a", "META b", "txt c"]
    assert "2 image(s) listed in a metadata file also have a .txt caption file beside them (a.txt, b.txt)" in log.text


def test_excluded_keys_are_no_samples(tmp_path):
    """Files a family says are no samples of their own (an edit model's control images) are not listed, so they need
    no caption."""
    make_image(tmp_path / "a.png")
    make_image(tmp_path / "controls" / "a.png")
    write_jsonl(tmp_path / "metadata.jsonl", [{"file_name": "a.png", "text": "x", "control_image": "controls/a.png"}])
    with pytest.raises(UserError, match="no caption"):
        load_samples(train_data_dir=tmp_path, log=Log())
    assert keys(load_samples(train_data_dir=tmp_path, log=Log(), exclude_keys=frozenset({"controls/a.png"}))) == [
        "a.png"]
