"""config/peer_files.py: which trainer's file a dataset config is, dit-lora's own keys beside a peer's, entries of one
name, caption files of several lines, and a peer's file given as --config (issue 76)."""

from __future__ import annotations

import pytest

from dit_lora.config.dataset_file import read_dataset_config
from dit_lora.core.errors import UserError
from peer_files_data import DIFFUSION_PIPE_TOML, ONETRAINER_CONCEPT, SIMPLETUNER_WAN, concepts, simpletuner, write


def test_dit_loras_own_keys_pass_through_a_peers_entry(tmp_path):
    """A `weight` added to each backend, as the docs say for fixed shares, is read as dit-lora's."""
    path = write(tmp_path, "m.json", [{"id": "a", "type": "local", "instance_data_dir": "a",
                                        "caption_strategy": "textfile", "weight": 3},
                                       {"id": "b", "type": "local", "instance_data_dir": "b",
                                        "caption_strategy": "textfile", "weight": 1}])
    assert [s.weight for s in read_dataset_config(path).sets] == [3.0, 1.0]


@pytest.mark.parametrize("name, content, peer", [
    ("concepts.json", [ONETRAINER_CONCEPT], "OneTrainer's"),
    ("config.json", {"training_method": "LORA", "concepts": [ONETRAINER_CONCEPT]}, "OneTrainer's"),
    ("multidatabackend.json", SIMPLETUNER_WAN, "SimpleTuner's"),
    ("dataset.toml", DIFFUSION_PIPE_TOML, "diffusion-pipe's"),
])
def test_a_peers_dataset_file_given_as_the_run_config_names_dataset_config(tmp_path, name, content, peer):
    from dit_lora.config import parse_config

    path = write(tmp_path, name, content)
    with pytest.raises(UserError) as err:
        parse_config(["--config", path])
    assert f"is {peer} dataset" in str(err.value) and f"pass it as --dataset_config {path}" in str(err.value)


def test_multi_line_caption_files_are_said_read_whole(tmp_path):
    """SimpleTuner (unless `disable_multiline_split`) and OneTrainer take each line as a caption of its own."""
    folder = tmp_path / "photos"
    folder.mkdir()
    (folder / "a.txt").write_text("a red square\na square in red\n")
    (folder / "b.txt").write_text("one line\n")
    note = simpletuner(tmp_path, instance_data_dir=str(folder)).note
    assert "1 caption file(s) of several lines (a.txt) read whole, each one caption: SimpleTuner takes each" in note
    note = simpletuner(tmp_path, instance_data_dir=str(folder), disable_multiline_split=True).note
    assert "several lines" not in note and "disable_multiline_split" not in note  # what dit-lora does, said nothing
    note = concepts(tmp_path, ONETRAINER_CONCEPT | {"path": str(folder)}).note
    assert "OneTrainer takes each line as a caption of its own" in note


def test_two_entries_of_one_name_are_numbered_and_one_area_given_twice_is_one_set(tmp_path):
    read = concepts(tmp_path, ONETRAINER_CONCEPT, ONETRAINER_CONCEPT | {"path": "more"})
    assert [s.name for s in read.sets] == ["Training Images", "Training Images-2"]
    text = "resolutions = [512, [512, 512]]\n[[directory]]\npath = '/d'\n"
    assert [s.options["resolution"] for s in read_dataset_config(write(tmp_path, "d.toml", text)).sets] == [512]
