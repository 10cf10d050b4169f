"""config/config_file.py: the --config YAML read for a run of one family; its unknown keys named all at once with
their hints; another trainer's file or a second list of sets named as such."""

from __future__ import annotations

import pytest

from dit_lora.config import parse_config
from dit_lora.core.errors import UserError

MIN = ["--pretrained_model_name_or_path", "org/model", "--train_data_dir", "data"]


def test_unknown_yaml_key_names_closest(tmp_path):
    path = tmp_path / "c.yaml"
    path.write_text("learnig_rate: 1.0e-4\n")
    with pytest.raises(UserError, match="learnig_rate.*Did you mean `learning_rate`"):
        parse_config(["--config", str(path)] + MIN)


def test_an_unknown_yaml_key_gets_the_peer_hint(tmp_path):
    config = tmp_path / "run.yaml"
    config.write_text("family: sana\nsave_every_n_steps: 100\n")
    with pytest.raises(UserError, match="`save_every_n_steps` in .*--checkpointing_steps"):
        parse_config(["--config", str(config)])


def test_a_flat_yaml_with_several_unknown_keys_names_them_all_with_their_hints(tmp_path):
    config = tmp_path / "kohya.yaml"
    config.write_text("family: sana\nnetwork_dim: 16\nsave_every_n_steps: 100\nlearnig_rate: 1.0e-4\n")
    for argv in (["--config", str(config)], ["--family", "sana", "--config", str(config)]):
        with pytest.raises(UserError) as err:
            parse_config(argv)
        text = str(err.value)
        assert text.startswith(f"3 unknown options in {config}:"), text
        assert "`network_dim` (--network_dim comes from" in text and "--rank" in text
        assert "--checkpointing_steps" in text and "`learnig_rate` (Did you mean `learning_rate`?)" in text


def test_a_list_of_resolutions_says_there_is_one_resolution_and_buckets(tmp_path):
    config = tmp_path / "run.yaml"
    config.write_text("family: sana\nresolution: [64, 96]\n")
    with pytest.raises(UserError) as err:
        parse_config(["--config", str(config), "--train_data_dir", "d"])
    text = str(err.value)
    assert "is [64, 96], which is not a valid int" in text and "--aspect_buckets" in text
    assert "ai-toolkit's list of resolutions" in text and "no dit-lora equivalent" in text


def test_shipped_configs_parse():
    from helpers import ROOT
    from dit_lora.config import load_yaml

    files = sorted((ROOT / "recipes" / "configs").rglob("*.yaml"))
    assert len(files) >= 3
    from dit_lora.registry import available, recipe_script

    for f in files:
        values = load_yaml(f)
        assert values.get("family", "sana") in available(), f
        # configs/<recipe>/*.yaml: the folder is named after the recipe that trains the family
        recipe = recipe_script(values.get("family", "sana"))
        assert recipe == f"recipes/{f.parent.name}_lora.py", f


def test_a_file_that_is_no_run_config_is_named_with_what_to_do(tmp_path):
    """A missing file, a YAML list, another trainer's dataset file: each one paragraph naming the file and the fix."""
    from dit_lora.config.config_file import read_yaml

    with pytest.raises(UserError, match=r"`.*nope\.yaml` \(from --config\) does not exist\. Check the path\."):
        read_yaml(tmp_path / "nope.yaml")
    listed = tmp_path / "list.yaml"
    listed.write_text("- 1\n- 2\n")
    with pytest.raises(UserError, match=r"must be a mapping of option: value, not list\."):
        read_yaml(listed)
    concepts = tmp_path / "onetrainer.json"  # OneTrainer's training config, its concepts inside
    concepts.write_text('{"concepts": [{"name": "dogs", "path": "/data/dogs"}]}')
    with pytest.raises(UserError, match=rf"is OneTrainer's dataset file, not a run config: pass it as "
                                        rf"--dataset_config {concepts}"):
        read_yaml(concepts)


def test_a_datasets_list_in_the_run_config_is_read_as_its_dataset_config(tmp_path):
    from dit_lora.config.config_file import read_yaml

    config = tmp_path / "run.yaml"
    config.write_text("rank: 8\ngeneral: {resolution: 64}\ndatasets:\n  - train_data_dir: d\n")
    assert read_yaml(config) == {"rank": 8, "dataset_config": str(config)}
    config.write_text("dataset_config: sets.yaml\ndatasets:\n  - train_data_dir: d\n")
    with pytest.raises(UserError, match="has both a `datasets:` list and `dataset_config: sets.yaml`"):
        read_yaml(config)


def test_the_family_a_file_names_is_read_as_its_canonical_name(tmp_path):
    from pathlib import Path

    from dit_lora.config.config_file import load_yaml, named_in_file

    assert named_in_file({"family": "z-image"}, Path("c.yaml")) == ("zimage", "`family:` in c.yaml")
    assert named_in_file({"family": ""}, Path("c.yaml")) is None and named_in_file({}, Path("c.yaml")) is None
    config = tmp_path / "c.yaml"
    config.write_text("family: dit\nnum_classes: 10\n")  # a dit option: read for the file's own family
    assert load_yaml(config) == {"family": "dit", "num_classes": 10}
    with pytest.raises(UserError, match="num_classes"):
        load_yaml(config, "sana", "--family")


def test_a_mapping_read_already_is_not_read_again(tmp_path):
    from dit_lora.config.config_file import yaml_of

    assert yaml_of(None, None) == {} and yaml_of("unread.yaml", {"rank": 4}) == {"rank": 4}
    with pytest.raises(UserError, match="does not exist"):
        yaml_of(str(tmp_path / "gone.yaml"), None)
