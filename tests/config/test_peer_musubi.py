"""config/peer_musubi.py: musubi-tuner's TOML (and kohya's subsets) read as dit-lora sets: its documented sample,
sizes for image and video families, every frame extraction at the clip's own speed, what its frames and buckets ask
that dit-lora does otherwise said in the paragraph."""

from __future__ import annotations

import pytest

from dit_lora.config.dataset_file import read_dataset_config
from dit_lora.config.peer_musubi import MUSUBI
from dit_lora.core.errors import UserError
from peer_files_data import musubi_clip_set

#: musubi-tuner's documented sample (src/musubi_tuner/dataset/dataset_config.md), an image and a video set
MUSUBI_TOML = """
[general]
resolution = [960, 544]
caption_extension = ".txt"
batch_size = 1
enable_bucket = true
bucket_no_upscale = false

[[datasets]]
image_directory = "/data/images"
cache_directory = "/data/cache_img"
num_repeats = 2

[[datasets]]
video_directory = "/data/videos"
cache_directory = "/data/cache_vid"
target_frames = [1, 25, 45]
frame_extraction = "head"
"""


def test_musubi_tuners_file_for_a_video_family(tmp_path):
    path = tmp_path / "dataset.toml"
    path.write_text(MUSUBI_TOML)
    read = read_dataset_config(path, video=True)
    assert read.flavour == MUSUBI
    images, videos = read.sets
    assert images.options == {"train_data_dir": "/data/images", "caption_extension": ".txt", "width": 960,
                              "height": 544}
    assert images.repeats == 2
    assert videos.options["frame_buckets"] == "1x544x960,25x544x960,45x544x960"
    assert videos.options["frame_sampling"] == "first"
    note = read.note
    assert note is not None and "\n" not in note and str(path) in note
    for word in ("`batch_size = 1`", "`cache_directory = \"/data/cache_img\"`", "`bucket_no_upscale = false`"):
        assert word in note, word  # each left-out key with its value, as the file writes it


def test_musubi_tuners_sizes_for_an_image_family(tmp_path):
    path = tmp_path / "dataset.toml"
    path.write_text(MUSUBI_TOML.split("[[datasets]]\nvideo_directory")[0])
    (images,) = read_dataset_config(path, video=False).sets
    # bucketed: buckets of about 960 x 544 pixels, a side of sqrt(960 * 544) in steps of 16
    assert images.options["resolution"] == 720 and "aspect_buckets" not in images.options
    fixed = tmp_path / "fixed.toml"
    fixed.write_text('[[datasets]]\nimage_directory = "a"\nresolution = [768, 512]\nenable_bucket = false\n')
    (one,) = read_dataset_config(fixed).sets
    assert one.options["aspect_buckets"] == "768x512"


def test_kohyas_subsets_are_sets(tmp_path):
    path = tmp_path / "kohya.toml"
    path.write_text('[[datasets]]\nresolution = 512\n\n  [[datasets.subsets]]\n  image_dir = "a"\n  num_repeats = 3\n'
                    '\n  [[datasets.subsets]]\n  image_dir = "b"\n  flip_aug = true\n')
    read = read_dataset_config(path)
    (a, b) = read.sets
    assert a.options == {"train_data_dir": "a", "resolution": 512} and a.repeats == 3
    assert b.options == {"train_data_dir": "b", "resolution": 512}
    assert read.note is not None and "`flip_aug = true` (flips hold for the whole run: --random_flip)" in read.note


def test_what_musubi_tuners_frames_ask_and_cannot_get_is_said(tmp_path):
    path = tmp_path / "d.toml"
    path.write_text('[[datasets]]\nvideo_directory = "v"\nresolution = [64, 48]\ntarget_frames = [9]\n'
                    'frame_extraction = "chunk"\n[[datasets]]\nvideo_directory = "w"\ntarget_frames = [9]\n')
    read = read_dataset_config(path, video=True)
    assert read.sets[0].options == {"train_data_dir": "v", "frame_buckets": "9x48x64", "frame_sampling": "first"}
    assert "`frame_extraction = 'chunk'` (musubi-tuner trains every run" in read.note
    assert "`target_frames` (frame buckets need" in read.note
    bad = tmp_path / "bad.toml"
    bad.write_text('[[datasets]]\nvideo_directory = "v"\nresolution = ["wide", 48]\n')
    with pytest.raises(UserError, match="not a whole number"):
        read_dataset_config(bad, video=True)


def test_several_target_frames_are_buckets_and_said_so(tmp_path):
    path = tmp_path / "d.toml"
    path.write_text('[[datasets]]\nvideo_directory = "v"\nresolution = [64, 48]\ntarget_frames = [1, 5, 9]\n')
    read = read_dataset_config(path, video=True)
    assert read.sets[0].options["frame_buckets"] == "1x48x64,5x48x64,9x48x64"
    assert "musubi-tuner takes a sample of each count" in read.note


def test_musubi_tuners_uniform_takes_runs_of_consecutive_frames_at_the_clips_speed(tmp_path):
    # musubi-tuner's uniform: `frame_sample` runs of N consecutive frames (its docs' diagram), never frames spread
    # over the clip: dit-lora's `first` keeps the speed, and the runs it cannot give are named
    read = musubi_clip_set(tmp_path, 'frame_extraction = "uniform"\nframe_sample = 4\n')
    assert read.sets[0].options["frame_sampling"] == "first"
    assert "`frame_extraction = 'uniform'` with `frame_sample = 4` (musubi-tuner trains 4 runs" in read.note
    assert "at the clip's own speed" in read.note


@pytest.mark.parametrize("extra, said", [
    ("", None),  # musubi-tuner's default is head
    ('frame_extraction = "head"\n', None),
    ('frame_extraction = "uniform"\n', None),  # one sample: musubi-tuner itself makes it head
    ('frame_extraction = "chunk"\n', "`frame_extraction = 'chunk'`"),
    ('frame_extraction = "slide"\nframe_stride = 10\n', "with `frame_stride = 10` (musubi-tuner trains a run"),
])
def test_every_musubi_extraction_keeps_the_clips_speed(tmp_path, extra, said):
    read = musubi_clip_set(tmp_path, extra)
    assert read.sets[0].options == {"train_data_dir": "v", "frame_buckets": "9x48x64", "frame_sampling": "first"}
    assert (said is None and (read.note is None or "frame_extraction" not in read.note)) or said in read.note


def test_musubi_tuners_full_extraction_is_a_bucket_per_length(tmp_path):
    read = musubi_clip_set(tmp_path, 'frame_extraction = "full"\nmax_frames = 11\n')
    assert read.sets[0].options["frame_buckets"] == "1x48x64,5x48x64,9x48x64"  # target_frames: unread, as there
    assert read.sets[0].options["frame_sampling"] == "first" and read.note is None


def test_an_unknown_extraction_is_refused_and_a_sets_own_sampling_is_kept(tmp_path):
    with pytest.raises(UserError, match="`frame_extraction = 'unifrom'`, which musubi-tuner does not take"):
        musubi_clip_set(tmp_path, 'frame_extraction = "unifrom"\n')
    read = musubi_clip_set(tmp_path, 'frame_sampling = "uniform"\n')
    assert read.sets[0].options["frame_sampling"] == "uniform"
    with pytest.raises(UserError, match="gives `frame_sampling` and also musubi-tuner's key"):
        musubi_clip_set(tmp_path, 'frame_sampling = "uniform"\nframe_extraction = "head"\n')


def test_what_musubi_tuners_buckets_ask_of_clips_is_named(tmp_path):
    note = musubi_clip_set(tmp_path, "enable_bucket = true\n").note
    assert "`enable_bucket = true` beside `target_frames` (frame buckets have one size each" in note
    path = tmp_path / "plain.toml"
    path.write_text('[[datasets]]\nvideo_directory = "v"\nresolution = [64, 48]\n')
    note = read_dataset_config(path, video=True).note
    assert "`video_directory` without `target_frames` (musubi-tuner's default [1]" in note
    assert "`enable_bucket = false` (images and clips take aspect buckets of about 64 x 48 pixels" in note
    note = _clip_set_for_images(tmp_path)
    assert "`target_frames` (an image family reads no clips)" in note


def _clip_set_for_images(tmp_path):
    path = tmp_path / "images.toml"
    path.write_text('[[datasets]]\nimage_directory = "i"\nresolution = [64, 48]\ntarget_frames = [9]\n')
    return read_dataset_config(path, video=False).note
