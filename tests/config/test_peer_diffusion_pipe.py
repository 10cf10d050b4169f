"""config/peer_diffusion_pipe.py: diffusion-pipe's dataset.toml read as diffusion-pipe reads it (issue 76): each key
maps, is named with its value, or is refused in one paragraph."""

from __future__ import annotations

import pytest

from dit_lora.config.dataset_file import read_dataset_config
from dit_lora.core.errors import UserError
from peer_files_data import DIFFUSION_PIPE_TOML, write


def test_diffusion_pipes_example_for_an_image_family(tmp_path):
    read = read_dataset_config(write(tmp_path, "dataset.toml", DIFFUSION_PIPE_TOML))
    assert read.flavour == "diffusion-pipe"
    (images,) = read.sets
    assert images.options == {"train_data_dir": "/home/anon/data/images/grayscale", "resolution": 512}
    for said in ("`min_ar = 0.5` (buckets step", "`num_ar_buckets = 7`", "`frame_buckets = [1, 33]` (an image family"):
        assert said in read.note, said


def test_diffusion_pipes_frame_buckets_for_a_video_family(tmp_path):
    read = read_dataset_config(write(tmp_path, "dataset.toml", DIFFUSION_PIPE_TOML), video=True)
    (clips,) = read.sets
    # bucket 1 is diffusion-pipe's images: dit-lora gives images one-frame buckets of their own, and a clip too short
    # for 33 frames is left out, as diffusion-pipe drops it (never trained as a still)
    assert clips.options["frame_buckets"] == "33x512x512" and clips.options["frame_sampling"] == "first"
    assert "frame_sampling" in clips.derived.implied  # --frame_sampling on the command line takes its place
    assert "`frame_buckets` of clips at their own frame rate" in read.note


def test_diffusion_pipes_directory_overrides_squares_and_several_resolutions(tmp_path):
    text = """
resolutions = [768]
num_repeats = 8
[[directory]]
path = '/data/videos'
resolutions = [512, [1280, 720]]
[[directory]]
path = '/data/images'
enable_ar_bucket = true
"""
    read = read_dataset_config(write(tmp_path, "dataset.toml", text))
    videos_512, videos_960, images = read.sets
    assert (videos_512.name, videos_512.options["resolution"], videos_512.options["aspect_buckets"]) == (
        "videos@512", 512, "square")  # enable_ar_bucket off, diffusion-pipe's default: squares
    assert videos_960.options["resolution"] == 960  # [1280, 720]'s area as a square's side
    assert images.options == {"train_data_dir": "/data/images", "resolution": 768} and images.repeats == 8


@pytest.mark.parametrize("text, words", [
    ("mask_path = '/m'", "reads each image's mask from a folder of its own"),
    ("control_path = '/c'", "control images train only the edit families"),
    ("num_repeats = 0.5", "trains that share of its samples per epoch"),
])
def test_diffusion_pipe_directories_that_would_train_otherwise_are_refused(tmp_path, text, words):
    with pytest.raises(UserError, match=words):
        read_dataset_config(write(tmp_path, "dataset.toml", f"resolutions = [512]\n[[directory]]\npath = '/d'\n{text}\n"))


def test_a_folder_whose_captions_are_in_captions_json_is_refused(tmp_path):
    (tmp_path / "d").mkdir()
    (tmp_path / "d" / "captions.json").write_text("{}")
    with pytest.raises(UserError, match="holds captions.json, from which diffusion-pipe takes every caption"):
        read_dataset_config(write(tmp_path, "dataset.toml", f"resolutions = [512]\n[[directory]]\npath = '{tmp_path / 'd'}'\n"))


def test_cosmos_size_buckets(tmp_path):
    text = "size_buckets = [[960, 960, 1], [960, 704, 1]]\n[[directory]]\npath = '/d'\n"
    with pytest.raises(UserError, match="`size_buckets` of 2 image sizes"):
        read_dataset_config(write(tmp_path, "dataset.toml", text))
    (one,) = read_dataset_config(write(tmp_path, "d.toml", text.replace(", [960, 704, 1]", ""))).sets
    assert one.options["aspect_buckets"] == "960x960"
    (clips,) = read_dataset_config(write(tmp_path, "d.toml", text.replace("704, 1]", "704, 33]")), video=True).sets
    assert clips.options["frame_buckets"] == "33x704x960"


def test_the_refusals_fix_for_a_share_of_batches_is_accepted(tmp_path):
    """What the fractional-num_repeats paragraph advises (`num_repeats = 1` and a `weight` in every directory) reads."""
    base = "resolutions = [512]\n[[directory]]\npath = '/a'\n{a}\n[[directory]]\npath = '/b'\nweight = 1\n"
    with pytest.raises(UserError, match="give every directory `num_repeats = 1` and a `weight`"):
        read_dataset_config(write(tmp_path, "d.toml", base.format(a="num_repeats = 0.5\nweight = 3")))
    read = read_dataset_config(write(tmp_path, "d.toml", base.format(a="num_repeats = 1\nweight = 3")))
    assert [s.weight for s in read.sets] == [3.0, 1.0]
