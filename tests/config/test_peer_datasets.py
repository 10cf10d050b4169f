"""config/peer_datasets.py: musubi-tuner's TOML and an ai-toolkit job's datasets are read alike as dit-lora sets
where their keys map (each trainer's own keys: test_peer_musubi.py, test_peer_ai_toolkit.py); what is left out is
named in one paragraph in the file's syntax, what would train something else is refused, a typo of a key that maps
is refused, and what a set stands for beyond its names is kept (Derived)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import yaml

from dit_lora.config.dataset_file import read_dataset_config
from dit_lora.core.errors import UserError
from peer_files_data import ai_toolkit_job, musubi_clip_set


def test_musubi_tuners_jsonl_metadata_is_refused(tmp_path):
    path = tmp_path / "dataset.toml"
    path.write_text('[[datasets]]\nimage_jsonl_file = "meta.jsonl"\nresolution = [512, 512]\n')
    with pytest.raises(UserError, match="metadata JSONL .* is not read: write a metadata.jsonl"):
        read_dataset_config(path)


def test_keys_set_to_their_default_pass_and_dit_loras_own_keys_pass_through(tmp_path):
    path = ai_toolkit_job(tmp_path, [{"folder_path": "/d", "control_path": None, "is_reg": False, "weight": 2,
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


def test_a_typo_of_a_key_that_maps_is_refused_and_the_job_says_what_it_reads(tmp_path):
    toml = tmp_path / "typo.toml"
    toml.write_text('[[datasets]]\nimage_directory = "a"\nnum_repeat = 3\n')
    with pytest.raises(UserError, match="the key `num_repeat`: did you mean `num_repeats`"):
        read_dataset_config(toml)
    with pytest.raises(UserError, match="the key `folder_pth`: did you mean `folder_path`"):
        read_dataset_config(ai_toolkit_job(tmp_path, [{"folder_pth": "/d"}]))
    note = read_dataset_config(ai_toolkit_job(tmp_path, [{"folder_path": "/d"}])).note
    assert note is not None and "read as dit-lora's sets. Only the job's `datasets` are read" in note


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
        read_dataset_config(ai_toolkit_job(tmp_path, [{"folder_path": "/d", "loss_multiplier": -1}]))
    (one,) = read_dataset_config(ai_toolkit_job(tmp_path, [{"folder_path": "/d", "caption_ext": "txt", "num_repeats": 2}])).sets
    assert one.keys == {"train_data_dir": "folder_path", "caption_extension": "caption_ext", "repeats": "num_repeats"}
    native = tmp_path / "native.yaml"
    native.write_text(yaml.safe_dump({"datasets": [{"image_directory": "a", "repeats": 2}]}))
    assert read_dataset_config(native).sets[0].keys == {"train_data_dir": "image_directory"}
    # an option whose value is not its source's keeps its own name (`frame_sampling`, never `frame_extraction`)
    assert musubi_clip_set(tmp_path, 'frame_extraction = "head"\n').sets[0].keys == {"train_data_dir": "video_directory"}


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
    implied = musubi_clip_set(tmp_path, "").sets[0].derived
    assert implied.implied == {"frame_sampling": "musubi-tuner's default `frame_extraction = 'head'`"}
    assert implied.origin == {}
    own = musubi_clip_set(tmp_path, 'frame_extraction = "chunk"\n').sets[0].derived
    assert own.implied == {} and own.origin == {"frame_sampling": "`frame_extraction = 'chunk'`"}
    job = read_dataset_config(ai_toolkit_job(tmp_path, [{"folder_path": "/c", "num_frames": 33}]), video=True).sets[0]
    assert job.derived.implied == {"frame_sampling": "ai-toolkit's default `shrink_video_to_frames: true`"}


def test_musubi_tuners_full_extraction_is_fitted_to_the_family_where_it_is_known(tmp_path):
    read = musubi_clip_set(tmp_path, 'frame_extraction = "full"\nmax_frames = 33\n')
    assert read.sets[0].derived.fit == {"full_frames": 33, "height": 48, "width": 64}
