"""config/peer_ai_toolkit.py: an ai-toolkit job's datasets read as dit-lora sets (a list of resolutions a set each, a
clip set's side, the class set, the trigger word and frame keys named), and its nested job YAML given as --config
named as such, with its main keys' dit-lora options."""

from __future__ import annotations

import pytest
import yaml

from dit_lora.config import parse_config
from dit_lora.config.dataset_file import read_dataset_config
from dit_lora.config.peer_ai_toolkit import AI_TOOLKIT
from dit_lora.core.errors import UserError
from peer_files_data import ai_toolkit_job


_AI_TOOLKIT_JOB = """\
job: extension
config:
  name: my_lora
  process:
    - type: sd_trainer
      training_folder: output
      network: {type: lora, linear: 16, linear_alpha: 16}
      datasets:
        - folder_path: /data/dogs
          caption_ext: txt
          resolution: [512, 768]
      train: {batch_size: 1, steps: 2000, lr: 1.0e-4}
      model: {name_or_path: Efficient-Large-Model/Sana_600M_512px_diffusers}
"""


@pytest.mark.parametrize("how", ["train", "load_yaml"])
def test_an_ai_toolkit_job_file_is_named_as_such_with_its_key_mapping(tmp_path, how):
    """ai-toolkit's nested job YAML: one paragraph saying what it is, that dit-lora's YAML is flat, the main keys'
    counterparts and the migration page (it said "Unknown option `job`")."""
    from dit_lora.config.config_file import load_yaml

    config = tmp_path / "aitk.yaml"
    config.write_text(_AI_TOOLKIT_JOB)
    with pytest.raises(UserError) as err:
        parse_config(["--config", str(config)]) if how == "train" else load_yaml(config)
    text = str(err.value)
    assert "ai-toolkit config" in text and "flat" in text and "docs/guides/migrating.md" in text
    for pair in ("network.linear -> `rank`", "train.lr -> `learning_rate`", "datasets[].folder_path -> "
                 "`train_data_dir`", "model.name_or_path -> `pretrained_model_name_or_path`"):
        assert pair in text, pair
    assert "Unknown option" not in text and "\n" not in text


def test_only_a_job_with_a_process_list_is_ai_toolkits():
    from dit_lora.config.peer_ai_toolkit import is_ai_toolkit

    assert is_ai_toolkit({"job": "extension", "config": {"process": []}})
    assert is_ai_toolkit({"config": {"name": "x", "process": [{"type": "sd_trainer"}]}})
    assert not is_ai_toolkit({"job": "extension"}) and not is_ai_toolkit({"config": {"process": {}}})
    assert not is_ai_toolkit({"rank": 8, "family": "sana"})


def test_an_ai_toolkit_job_files_datasets(tmp_path):
    path = ai_toolkit_job(tmp_path, [{"folder_path": "/data/me", "caption_ext": "txt", "caption_dropout_rate": 0.05,
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
    path = ai_toolkit_job(tmp_path, [{"folder_path": "/clips", "num_frames": 33, "resolution": [512]}])
    (clips,) = read_dataset_config(path, video=True).sets
    assert clips.options == {"train_data_dir": "/clips", "max_num_frames": 33, "frame_sampling": "uniform",
                             "height": 512, "width": 512}


def test_ai_toolkits_resolution_sizes_a_video_familys_sets_as_musubi_tuners_does(tmp_path):
    # it was left out for the video families (64 px clips upscaled x9.75 to the checkpoint's size) while musubi-tuner's
    # was read: the side of a square of the buckets' area, each resolution of a list a set, as for images
    read = read_dataset_config(ai_toolkit_job(tmp_path, [{"folder_path": "/me", "resolution": [64, 632]}]), video=True)
    assert [(s.name, s.options["height"], s.options["width"]) for s in read.sets] == [("me@64", 64, 64),
                                                                                    ("me@632", 624, 624)]
    # each family rounds to its own size step once it is known (data_sets.fit_to_family), and says so then
    assert [s.derived.fit for s in read.sets] == [{"side": 64}, {"side": 632}] and "step by" not in read.note
    assert "`resolution: 64`" not in read.note and "`resolution` (clips take" not in read.note


def test_an_ai_toolkit_regularization_set_is_the_class_set(tmp_path):
    read = read_dataset_config(ai_toolkit_job(tmp_path, [{"folder_path": "/me"}, {"folder_path": "/reg", "is_reg": True}]))
    assert [s.is_reg for s in read.sets] == [False, True]
    with pytest.raises(UserError, match="only class images"):
        read_dataset_config(ai_toolkit_job(tmp_path, [{"folder_path": "/reg", "is_reg": True}]))


def test_an_ai_toolkit_job_without_datasets_is_named(tmp_path):
    path = tmp_path / "job.yaml"
    path.write_text(yaml.safe_dump({"job": "extension", "config": {"process": [{"type": "sd_trainer"}]}}))
    with pytest.raises(UserError, match="no `datasets` list"):
        read_dataset_config(path)


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
    (clips,) = read_dataset_config(ai_toolkit_job(tmp_path, [{"folder_path": "/c", "num_frames": 33}]), video=True).sets
    assert clips.options["frame_sampling"] == "uniform"  # shrink_video_to_frames, ai-toolkit's default
    read = read_dataset_config(ai_toolkit_job(tmp_path, [{"folder_path": "/c", "num_frames": 33,
                                                "shrink_video_to_frames": False}]), video=True)
    assert "frame_sampling" not in read.sets[0].options and "`shrink_video_to_frames: false`" in read.note
    note = read_dataset_config(ai_toolkit_job(tmp_path, [{"folder_path": "/c", "num_frames": 33}])).note
    assert "`num_frames: 33` (an image family reads no clips)" in note
    note = read_dataset_config(ai_toolkit_job(tmp_path, [{"folder_path": "/c", "num_frames": 1}]), video=True).note
    assert "`num_frames: 1` (clips train at the run's frame count" in note
