"""kohya-ss folder names, the caption flags' checks and the copies screening hands one verdict
(dit_lora.data.kohya), for image and video samples alike."""

from __future__ import annotations

import pytest

from dit_lora.data.kohya import (MAX_FOLDER_REPEATS, checked_caption_extension, checked_instance_prompt, copies_note,
                                 copy_of, kohya_folder, kohya_folders, repeat_folder_samples)
from dit_lora.data.sources import RawSample
from dit_lora.data.video import VideoSample
from dit_lora.core.errors import UserError


@pytest.mark.parametrize("name, parsed", [("10_sks dog", (10, "sks dog")), ("10", (10, "")),
                                          ("2024_trip", (2024, "trip")), ("trip_2024", None), ("_x", None)])
def test_kohya_folder_reads_names_as_sd_scripts_does(name, parsed):
    assert kohya_folder(name) == parsed


def test_kohya_folders_are_first_level_only_and_bounded():
    keys = ["3_cat/a.png", "3_cat/sub/b.png", "plain/c.png", "top.png", "x/2_dog/d.png"]
    assert kohya_folders("root", keys) == {"3_cat": (3, "cat")}
    with pytest.raises(UserError, match=rf"each clip listed N times.*more than {MAX_FOLDER_REPEATS}"):
        kohya_folders("root", [f"{MAX_FOLDER_REPEATS + 1}_x/a.mp4"], noun="clip")


@pytest.mark.parametrize("make", [lambda k, c: RawSample(key=k, caption=c, path=f"/d/{k}"),
                                  lambda k, c: VideoSample(key=k, caption=c, path=f"/d/{k}")])
def test_repeats_of_images_and_clips_follow_their_first_and_name_it(make):
    lines: list[str] = []
    samples = [make("2_a/x", "one"), make("plain/y", "two")]
    out = repeat_folder_samples(samples, {"2_a": (2, "a")}, lines.append, noun="clip")
    assert [(s.key, s.repeat) for s in out] == [("2_a/x", 0), ("2_a/x", 1), ("plain/y", 0)]
    assert lines[0] == "`2_a/`: 1 clip(s) x 2 repeats = 2 samples per epoch (kohya's N_words folder)"
    assert lines[-1] == "3 samples per epoch from 2 clip(s)"
    assert copy_of(out) == [0, 0, 2]


def test_copy_of_keeps_distinct_rows_apart_and_an_orphan_copy_first():
    a, b = RawSample(key="k", caption="one"), RawSample(key="k", caption="two")  # two metadata rows, one file
    orphan = RawSample(key="o", caption="x", repeat=1)  # its first was left out (screening): it stands for itself
    samples = [a, a.__class__(key="k", caption="one", repeat=1), b, orphan, RawSample(key="o", caption="x", repeat=2)]
    assert copy_of(samples) == [0, 0, 2, 3, 3]
    assert copies_note(1) == "" and copies_note(4) == " (listed 4 times: kohya N_words/ repeats)"


def test_caption_flags_are_checked_once():
    assert checked_caption_extension("caption") == ".caption" and checked_caption_extension(".txt") == ".txt"
    with pytest.raises(UserError, match="names no extension"):
        checked_caption_extension(" . ")
    assert checked_instance_prompt(None) is None and checked_instance_prompt(" sks ") == "sks"
    with pytest.raises(UserError, match="--instance_prompt is empty"):
        checked_instance_prompt("  ")


def test_one_repeat_and_one_sample_are_singular():
    lines: list[str] = []
    repeat_folder_samples([RawSample(key="1_a/x", caption="c")], {"1_a": (1, "a")}, lines.append)
    assert lines == ["`1_a/`: 1 image(s) x 1 repeat = 1 sample per epoch (kohya's N_words folder)",
                     "1 sample per epoch from 1 image(s)"]


def test_files_in_sub_folders_of_a_kohya_folder_are_named_once_per_folder():
    lines: list[str] = []
    keys = ["10_sks dog/a.png", "10_sks dog/sub/b.png", "10_sks dog/sub/deeper/c.png", "10_sks dog/sub/d.png",
            "2_cat/e.png", "3/more/f.png", "plain/sub/g.png"]
    folders = {"10_sks dog": (10, "sks dog"), "2_cat": (2, "cat"), "3": (3, "")}
    out = repeat_folder_samples([RawSample(key=k, caption="") for k in keys], folders, lines.append)
    assert len(out) == 10 * 4 + 2 + 3 + 1  # nested files still train, with their folder's repeats
    nested = [line for line in lines if "in sub-folders" in line]
    assert nested == [
        "`10_sks dog/sub/`, `10_sks dog/sub/deeper/`: 3 image(s) in sub-folders train with `10_sks dog/`'s "
        "10 repeats and its words ('sks dog') (kohya's sd-scripts read only the folder itself)",
        "`3/more/`: 1 image(s) in sub-folders train with `3/`'s 3 repeats (kohya's sd-scripts read only the folder "
        "itself)",
    ]
