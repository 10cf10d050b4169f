"""config/peer_datasets.py: musubi-tuner's TOML (and kohya's subsets) and an ai-toolkit job YAML's datasets are read
as dit-lora sets where their keys map; what is left out is named in one paragraph, what would train something else
is refused."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import yaml

from dit_lora.config.dataset_file import read_dataset_config
from dit_lora.config.peer_datasets import AI_TOOLKIT, MUSUBI
from dit_lora.core.errors import UserError

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


def test_musubi_tuners_jsonl_metadata_is_refused(tmp_path):
    path = tmp_path / "dataset.toml"
    path.write_text('[[datasets]]\nimage_jsonl_file = "meta.jsonl"\nresolution = [512, 512]\n')
    with pytest.raises(UserError, match="metadata JSONL .* is not read: write a metadata.jsonl"):
        read_dataset_config(path)


def _job(tmp_path, datasets):
    path = tmp_path / "job.yaml"
    path.write_text(yaml.safe_dump({"job": "extension", "config": {"name": "x", "process": [
        {"type": "sd_trainer", "datasets": datasets}]}}))
    return path


def test_an_ai_toolkit_job_files_datasets(tmp_path):
    path = _job(tmp_path, [{"folder_path": "/data/me", "caption_ext": "txt", "caption_dropout_rate": 0.05,
                            "shuffle_tokens": False, "cache_latents_to_disk": True, "resolution": [512, 768],
                            "num_repeats": 2, "loss_multiplier": 0.5}])
    read = read_dataset_config(path)
    assert read.flavour == AI_TOOLKIT
    # a list of resolutions is one set per resolution, as ai-toolkit splits it
    assert [s.name for s in read.sets] == ["me@512", "me@768"]
    for s, size in zip(read.sets, (512, 768)):
        assert s.options == {"train_data_dir": "/data/me", "caption_extension": ".txt", "resolution": size}
        assert s.repeats == 2 and s.loss_weight == 0.5
    assert "`caption_dropout_rate: 0.05` (caption dropout holds for the whole run" in read.note
    assert "`cache_latents_to_disk: true`" in read.note


def test_an_ai_toolkit_video_dataset(tmp_path):
    path = _job(tmp_path, [{"folder_path": "/clips", "num_frames": 33, "resolution": [512]}])
    (clips,) = read_dataset_config(path, video=True).sets
    assert clips.options == {"train_data_dir": "/clips", "max_num_frames": 33, "frame_sampling": "uniform",
                             "height": 512, "width": 512}


def test_ai_toolkits_resolution_sizes_a_video_familys_sets_as_musubi_tuners_does(tmp_path):
    # it was left out for the video families (64 px clips upscaled x9.75 to the checkpoint's size) while musubi-tuner's
    # was read: the side of a square of the buckets' area, each resolution of a list a set, as for images
    read = read_dataset_config(_job(tmp_path, [{"folder_path": "/me", "resolution": [64, 632]}]), video=True)
    assert [(s.name, s.options["height"], s.options["width"]) for s in read.sets] == [("me@64", 64, 64),
                                                                                    ("me@632", 624, 624)]
    # each family rounds to its own size step once it is known (data_sets.fit_to_family), and says so then
    assert [s.derived.fit for s in read.sets] == [{"side": 64}, {"side": 632}] and "step by" not in read.note
    assert "`resolution: 64`" not in read.note and "`resolution` (clips take" not in read.note


def test_an_ai_toolkit_regularization_set_is_the_class_set(tmp_path):
    read = read_dataset_config(_job(tmp_path, [{"folder_path": "/me"}, {"folder_path": "/reg", "is_reg": True}]))
    assert [s.is_reg for s in read.sets] == [False, True]
    with pytest.raises(UserError, match="only class images"):
        read_dataset_config(_job(tmp_path, [{"folder_path": "/reg", "is_reg": True}]))


def test_an_ai_toolkit_job_without_datasets_is_named(tmp_path):
    path = tmp_path / "job.yaml"
    path.write_text(yaml.safe_dump({"job": "extension", "config": {"process": [{"type": "sd_trainer"}]}}))
    with pytest.raises(UserError, match="no `datasets` list"):
        read_dataset_config(path)


def test_keys_set_to_their_default_pass_and_dit_loras_own_keys_pass_through(tmp_path):
    path = _job(tmp_path, [{"folder_path": "/d", "control_path": None, "is_reg": False, "weight": 2,
                            "resolution": 512}])
    (one,) = read_dataset_config(path).sets
    assert one.options == {"train_data_dir": "/d", "resolution": 512} and one.weight == 2.0
    toml = tmp_path / "own.toml"
    toml.write_text('[[datasets]]\nimage_directory = "a"\nnum_repeats = 2\nloss_weight = 0.5\nweight = 1\n'
                    '[[datasets]]\ntrain_data_dir = "b"\nnum_repeats = 3\nweight = 1\n')
    a, b = read_dataset_config(toml).sets
    assert (a.repeats, a.loss_weight, b.repeats) == (2, 0.5, 3) and b.options == {"train_data_dir": "b"}
    clash = tmp_path / "clash.toml"
    clash.write_text('[[datasets]]\nimage_directory = "a"\ntrain_data_dir = "b"\n')
    with pytest.raises(UserError, match="gives `train_data_dir` and also musubi-tuner's key"):
        read_dataset_config(clash)


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


def test_a_typo_of_a_key_that_maps_is_refused_and_the_job_says_what_it_reads(tmp_path):
    toml = tmp_path / "typo.toml"
    toml.write_text('[[datasets]]\nimage_directory = "a"\nnum_repeat = 3\n')
    with pytest.raises(UserError, match="the key `num_repeat`: did you mean `num_repeats`"):
        read_dataset_config(toml)
    with pytest.raises(UserError, match="the key `folder_pth`: did you mean `folder_path`"):
        read_dataset_config(_job(tmp_path, [{"folder_pth": "/d"}]))
    note = read_dataset_config(_job(tmp_path, [{"folder_path": "/d"}])).note
    assert note is not None and "read as dit-lora's sets. Only the job's `datasets` are read" in note


def test_several_target_frames_are_buckets_and_said_so(tmp_path):
    path = tmp_path / "d.toml"
    path.write_text('[[datasets]]\nvideo_directory = "v"\nresolution = [64, 48]\ntarget_frames = [1, 5, 9]\n')
    read = read_dataset_config(path, video=True)
    assert read.sets[0].options["frame_buckets"] == "1x48x64,5x48x64,9x48x64"
    assert "musubi-tuner takes a sample of each count" in read.note


def _clip_set(tmp_path, extra: str):
    path = tmp_path / "clips.toml"
    path.write_text(f'[[datasets]]\nvideo_directory = "v"\nresolution = [64, 48]\ntarget_frames = [9]\n{extra}')
    return read_dataset_config(path, video=True)


def test_musubi_tuners_uniform_takes_runs_of_consecutive_frames_at_the_clips_speed(tmp_path):
    # musubi-tuner's uniform: `frame_sample` runs of N consecutive frames (its docs' diagram), never frames spread
    # over the clip: dit-lora's `first` keeps the speed, and the runs it cannot give are named
    read = _clip_set(tmp_path, 'frame_extraction = "uniform"\nframe_sample = 4\n')
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
    read = _clip_set(tmp_path, extra)
    assert read.sets[0].options == {"train_data_dir": "v", "frame_buckets": "9x48x64", "frame_sampling": "first"}
    assert (said is None and (read.note is None or "frame_extraction" not in read.note)) or said in read.note


def test_musubi_tuners_full_extraction_is_a_bucket_per_length(tmp_path):
    read = _clip_set(tmp_path, 'frame_extraction = "full"\nmax_frames = 11\n')
    assert read.sets[0].options["frame_buckets"] == "1x48x64,5x48x64,9x48x64"  # target_frames: unread, as there
    assert read.sets[0].options["frame_sampling"] == "first" and read.note is None


def test_an_unknown_extraction_is_refused_and_a_sets_own_sampling_is_kept(tmp_path):
    with pytest.raises(UserError, match="`frame_extraction = 'unifrom'`, which musubi-tuner does not take"):
        _clip_set(tmp_path, 'frame_extraction = "unifrom"\n')
    read = _clip_set(tmp_path, 'frame_sampling = "uniform"\n')
    assert read.sets[0].options["frame_sampling"] == "uniform"
    with pytest.raises(UserError, match="gives `frame_sampling` and also musubi-tuner's key"):
        _clip_set(tmp_path, 'frame_sampling = "uniform"\nframe_extraction = "head"\n')


def test_ai_toolkits_trigger_word_is_named_with_its_value_wherever_it_is_given(tmp_path):
    # ai-toolkit puts the trigger word before every caption (and writes it for `[trigger]`): dit-lora has no such
    # option, so the paragraph names it, the job's process-level one too (it was dropped without a word)
    path = tmp_path / "job.yaml"
    path.write_text(yaml.safe_dump({"config": {"process": [{"type": "sd_trainer", "trigger_word": "sks", "datasets": [
        {"folder_path": "/d"}, {"folder_path": "/e", "trigger_word": "zkz"}]}]}}))
    note = read_dataset_config(path).note
    assert "`trigger_word: 'sks'` of the job's process (no counterpart: ai-toolkit writes it for `[trigger]`" in note
    assert "`trigger_word: 'zkz'` (no counterpart" in note and "write it into the caption files" in note


def test_what_ai_toolkits_frame_keys_ask_is_mapped_or_named(tmp_path):
    (clips,) = read_dataset_config(_job(tmp_path, [{"folder_path": "/c", "num_frames": 33}]), video=True).sets
    assert clips.options["frame_sampling"] == "uniform"  # shrink_video_to_frames, ai-toolkit's default
    read = read_dataset_config(_job(tmp_path, [{"folder_path": "/c", "num_frames": 33,
                                                "shrink_video_to_frames": False}]), video=True)
    assert "frame_sampling" not in read.sets[0].options and "`shrink_video_to_frames: false`" in read.note
    note = read_dataset_config(_job(tmp_path, [{"folder_path": "/c", "num_frames": 33}])).note
    assert "`num_frames: 33` (an image family reads no clips)" in note
    note = read_dataset_config(_job(tmp_path, [{"folder_path": "/c", "num_frames": 1}]), video=True).note
    assert "`num_frames: 1` (clips train at the run's frame count" in note


def test_what_musubi_tuners_buckets_ask_of_clips_is_named(tmp_path):
    note = _clip_set(tmp_path, "enable_bucket = true\n").note
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


GUIDE = Path(__file__).resolve().parents[2] / "docs" / "guides" / "migrating.md"


def test_the_guide_refuses_what_the_translation_refuses_and_reads_is_reg_as_it_does(tmp_path):
    # the guide said "Refused: ... `is_reg`" for both peers while data.md and the code read it as the class images
    section = GUIDE.read_text().split("## Data layouts you bring", 1)[1]
    refused = " ".join(re.findall(r"Refused: (.*?)\.(?:\s|$)", section, flags=re.DOTALL))
    assert "`is_reg`" not in refused and "`control_directory`" in refused and "`control_path`" in refused
    toml = tmp_path / "reg.toml"
    toml.write_text('[[datasets]]\nimage_directory = "me"\n[[datasets]]\nimage_directory = "reg"\nis_reg = true\n')
    assert [s.is_reg for s in read_dataset_config(toml).sets] == [False, True]


def test_errors_name_the_users_own_keys_in_the_files_syntax(tmp_path):
    toml = tmp_path / "zero.toml"
    toml.write_text('[[datasets]]\nimage_directory = "a"\nnum_repeats = 0\n')
    with pytest.raises(UserError, match=r"^`num_repeats = 0` in data set 1 \(of 1\) of the dataset config"):
        read_dataset_config(toml)
    with pytest.raises(UserError, match=r"^`loss_multiplier: -1` in data set 1"):
        read_dataset_config(_job(tmp_path, [{"folder_path": "/d", "loss_multiplier": -1}]))
    (one,) = read_dataset_config(_job(tmp_path, [{"folder_path": "/d", "caption_ext": "txt", "num_repeats": 2}])).sets
    assert one.keys == {"train_data_dir": "folder_path", "caption_extension": "caption_ext", "repeats": "num_repeats"}
    native = tmp_path / "native.yaml"
    native.write_text(yaml.safe_dump({"datasets": [{"image_directory": "a", "repeats": 2}]}))
    assert read_dataset_config(native).sets[0].keys == {"train_data_dir": "image_directory"}
    # an option whose value is not its source's keeps its own name (`frame_sampling`, never `frame_extraction`)
    assert _clip_set(tmp_path, 'frame_extraction = "head"\n').sets[0].keys == {"train_data_dir": "video_directory"}


def test_a_toml_given_as_the_run_config_is_sent_to_dataset_config(tmp_path):
    from dit_lora.config import parse_config

    toml = tmp_path / "musubi.toml"
    toml.write_text('[general]\nresolution = [64, 64]\n\n[[datasets]]\nimage_directory = "a"\n')
    with pytest.raises(UserError) as err:
        parse_config(["--config", str(toml)])
    text = str(err.value)
    assert "is a TOML dataset config" in text and f"Pass it as --dataset_config {toml}" in text
    assert "not valid YAML" not in text
    renamed = tmp_path / "musubi.cfg"  # not named .toml: told by its content, once it is no YAML
    renamed.write_text(toml.read_text())
    with pytest.raises(UserError, match="is a TOML dataset config"):
        parse_config(["--config", str(renamed)])


def test_musubi_tuners_default_head_is_implied_and_its_own_extraction_is_its_origin(tmp_path):
    # without its own `frame_extraction` a clip set's `first` is only musubi-tuner's default: a run's explicit
    # --frame_sampling takes its place (data_sets.set_config); the file's own key is refused beside another value
    implied = _clip_set(tmp_path, "").sets[0].derived
    assert implied.implied == {"frame_sampling": "musubi-tuner's default `frame_extraction = 'head'`"}
    assert implied.origin == {}
    own = _clip_set(tmp_path, 'frame_extraction = "chunk"\n').sets[0].derived
    assert own.implied == {} and own.origin == {"frame_sampling": "`frame_extraction = 'chunk'`"}
    job = read_dataset_config(_job(tmp_path, [{"folder_path": "/c", "num_frames": 33}]), video=True).sets[0]
    assert job.derived.implied == {"frame_sampling": "ai-toolkit's default `shrink_video_to_frames: true`"}


def test_musubi_tuners_full_extraction_is_fitted_to_the_family_where_it_is_known(tmp_path):
    read = _clip_set(tmp_path, 'frame_extraction = "full"\nmax_frames = 33\n')
    assert read.sets[0].derived.fit == {"full_frames": 33, "height": 48, "width": 64}
