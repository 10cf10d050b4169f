"""config/parser.py: the family, the --config file and the flags put together into one TrainConfig: unknown
arguments judged before the data and model checks, an inferred family read in one pass and judged as a named one,
a data source on the command line taking the place of the file's."""

from __future__ import annotations

import pytest
import yaml

from dit_lora.config import parse_config
from dit_lora.core.errors import UserError

MIN = ["--pretrained_model_name_or_path", "org/model", "--train_data_dir", "data"]


@pytest.mark.parametrize("resolution", [7, 12])
def test_sana_resolution_below_the_stride_names_one_valid_size(tiny_sana, resolution):
    """A resolution below the latent stride has no lower multiple: the message offered "Use 8 or 8"."""
    from dit_lora.registry import get_family

    cfg = parse_config(["--pretrained_model_name_or_path", str(tiny_sana), "--train_data_dir", "d",
                        "--resolution", str(resolution)])
    with pytest.raises(UserError) as caught:
        get_family("sana").model.validate_config(cfg)
    text = str(caught.value)
    use = text.split("Use ", 1)[1]
    assert f"--resolution {resolution} is not divisible by" in text
    numbers = [int(n) for n in use.rstrip(".").split(" or ")]
    assert len(set(numbers)) == len(numbers) and all(n > 0 for n in numbers), text


def test_an_unknown_flag_is_judged_before_the_data_and_model_checks():
    """diffusers DreamBooth flags plus a flag no family has, no model and no data: the unknown flag is named first,
    with its peer counterpart (the old parser said "neither --train_data_dir nor --dataset_name was given")."""
    from dit_lora.commands.recipe import parse_run

    with pytest.raises(UserError) as err:
        parse_run(["--instance_data_dir", "dogs", "--instance_prompt", "a photo of sks dog", "--network_dim", "8"])
    text = str(err.value)
    assert text.startswith("Unknown option `--network_dim`") and "dit-lora's option is --rank" in text
    assert "data source" not in text and "validation_prompt" not in text


def test_an_explicit_video_option_of_an_image_run_is_refused_before_the_data_check(tmp_path):
    config = tmp_path / "run.yaml"
    config.write_text("family: dit\nmax_num_frames: 49\n")
    with pytest.raises(UserError) as err:
        parse_config(["--config", str(config)])
    assert f"`max_num_frames` in {config} is an option of video families" in str(err.value)
    with pytest.raises(UserError, match=r"^--frame_buckets is an option of video families"):
        parse_config(["--family", "sana", "--frame_buckets", "49x480x720"])


def test_several_unknown_flags_are_named_in_one_paragraph():
    with pytest.raises(UserError) as err:
        parse_config(["--family", "sana", "--network_dim", "8", "--network_alpha", "8", "--train_data_dir", "d"])
    text = str(err.value)
    assert text.startswith("2 unknown options on the command line:") and "--rank" in text and "--lora_alpha" in text


def _counting(monkeypatch) -> dict[str, int]:
    """Count the argparse passes over the run's options (the peek at --family/--config is not one) and the reads
    of YAML files."""
    import argparse

    from dit_lora.config import command_line

    counts = {"parses": 0, "yaml reads": 0}
    real_parse, real_load = argparse.ArgumentParser.parse_known_args, yaml.safe_load

    def parse(self, *args, **kwargs):
        counts["parses"] += isinstance(self, command_line._Parser)
        return real_parse(self, *args, **kwargs)

    def load(*args, **kwargs):
        counts["yaml reads"] += 1
        return real_load(*args, **kwargs)

    monkeypatch.setattr(argparse.ArgumentParser, "parse_known_args", parse)
    monkeypatch.setattr(yaml, "safe_load", load)
    return counts


def test_an_inferred_family_parses_the_command_line_and_reads_the_yaml_once(tmp_path, monkeypatch):
    """The family inferred from the common options: one argparse pass over every family's flags and one read of
    the YAML (there were two passes and four reads), then the family's own options checked and typed."""
    config = tmp_path / "run.yaml"
    config.write_text("rank: 8\nnum_classes: 10\n")
    counts = _counting(monkeypatch)
    cfg = parse_config([*MIN, "--config", str(config), "--resolution", "64", "--learning_rate", "2e-4"],
                       infer_family=lambda common: "dit")
    assert counts == {"parses": 1, "yaml reads": 1}
    assert (cfg.model.family, cfg.lora.rank, cfg.data.resolution, cfg.training.learning_rate) == ("dit", 8, 64, 2e-4)
    assert cfg.family_options.num_classes == 10
    assert cfg.explicit_options == {"family", "rank", "num_classes", "resolution", "learning_rate",
                                    "pretrained_model_name_or_path", "train_data_dir"}


@pytest.mark.parametrize("extra, expected", [
    (["--wan_expert", "high"], r"^--wan_expert is an option of the wan"),
    (["--wan_expert", "high", "--flow_shift", "3"], r"^--wan_expert is an option of the wan"),
    (["stray"], r"^Unexpected argument `stray` on the command line"),
    (["--num_classes", "ten"], r"^`num_classes` in --num_classes is 'ten', which is not a valid int"),
])
def test_an_inferred_family_refuses_as_the_named_family_does(extra, expected):
    """What one pass leaves for the inferred family to judge (another family's flags, a value without its option, a
    value of the wrong type) gets the paragraph ``--family dit`` gives."""
    inferred = [*MIN, *extra]
    named = [*MIN, "--family", "dit", *extra]
    messages = []
    for argv, infer in ((inferred, lambda common: ("dit", "--family")), (named, None)):
        with pytest.raises(UserError, match=expected) as err:
            parse_config(argv, infer_family=infer)
        messages.append(str(err.value))
    assert messages[0] == messages[1]


@pytest.mark.parametrize("in_file, flag", [("train_data_dir", "instance_data_dir"),
                                           ("instance_data_dir", "train_data_dir"),
                                           ("train_data_dir", "train_data_dir")])
def test_either_folder_flag_overrides_either_key_of_the_config_as_the_flag_does(tmp_path, in_file, flag):
    """Issue 76: --instance_data_dir over a config's train_data_dir was refused as "both were given", while
    --train_data_dir overrode it: the alias behaves as the flag it stands for. Both at one level stay refused."""
    config = tmp_path / "run.yaml"
    config.write_text(yaml.safe_dump({"family": "sana", "pretrained_model_name_or_path": "m", in_file: "old"}))
    cfg = parse_config(["--config", str(config), f"--{flag}", "new"])
    assert cfg.data.train_data_dir == "new" and cfg.data.instance_data_dir is None
    with pytest.raises(UserError, match="--instance_data_dir is diffusers' name for --train_data_dir"):
        parse_config(["--config", str(config), "--train_data_dir", "a", "--instance_data_dir", "b"])
