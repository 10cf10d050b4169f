"""config/parser.py: every numeric option is finite and in its range at parse time, however it was given.

Each numeric field of :class:`TrainConfig` declares its range next to itself (``valid=`` in the schema); a value
outside it, NaN or an infinity stops the parse with one paragraph naming the option, the value as written, the
range and where it came from: ``--x v``, ``--x=v`` or a YAML file.
"""

from __future__ import annotations

import math
import re

import pytest
import yaml

from dit_lora.config import parse_config
from dit_lora.config.owners import all_option_names, find_field, owners
from dit_lora.config.parser import build_argparser
from dit_lora.config.values import base_type as _base_type
from dit_lora.config.values import field_types as _field_types
from dit_lora.config.schema import Range
from dit_lora.core.errors import UserError

MIN = ["--pretrained_model_name_or_path", "org/model", "--train_data_dir", "data"]
#: every numeric option, common or a family's (each given with --family of a family that owns it)
NUMERIC = [find_field(name)[0] for name in all_option_names() if _base_type(_field_types()[name])[0] in (int, float)]


def _family_flag(name: str) -> list[str]:
    """``--family F`` for a family option (the first family that has it), nothing for a common one."""
    holders = owners(name)
    return ["--family", holders[0]] if holders else []


def _out_of_range(rule: Range) -> float | None:
    """A finite value just outside ``rule`` (None when every finite value is valid)."""
    if rule.low is not None:
        return rule.low if rule.low_open else rule.low - 1
    if rule.high is not None:
        return rule.high if rule.high_open else rule.high + 1
    return None


def _bad_values():
    for f in NUMERIC:
        rule = f.metadata["valid"]
        values = ["nan", "inf", "-inf"]
        bad = _out_of_range(rule)
        if bad is not None:
            is_int = _base_type(_field_types()[f.name])[0] is int
            values.append(str(int(bad)) if is_int else repr(float(bad)))
        for value in values:
            yield f.name, value


def _give(tmp_path, name: str, value: str, how: str) -> list[str]:
    if how == "flag":
        return MIN + _family_flag(name) + [f"--{name}", value]
    if how == "flag=":
        return MIN + _family_flag(name) + [f"--{name}={value}"]
    path = tmp_path / "c.yaml"
    # YAML's own spellings of the non-finite floats: .nan, .inf, -.inf
    text = {"nan": ".nan", "inf": ".inf", "-inf": "-.inf"}.get(value, value)
    path.write_text(f"{name}: {text}\n")
    return MIN + _family_flag(name) + ["--config", str(path)]


def test_every_numeric_option_declares_its_range():
    missing = [f.name for f in NUMERIC if not isinstance(f.metadata.get("valid"), Range)]
    assert not missing, f"give these options a `valid=` range (config/schema.py or the family's options): {missing}"
    assert len(NUMERIC) >= 48


@pytest.mark.parametrize("how", ["flag", "flag=", "yaml"])
@pytest.mark.parametrize("name,value", list(_bad_values()))
def test_bad_numeric_value_is_refused_with_one_paragraph(tmp_path, name, value, how):
    with pytest.raises(UserError) as caught:
        parse_config(_give(tmp_path, name, value, how))
    text = str(caught.value)
    rule = next(f.metadata["valid"] for f in NUMERIC if f.name == name)
    assert text.startswith(f"--{name} is "), text
    assert (str(rule) in text) or (str(rule) == "finite" and "a finite" in text), text
    if value in ("nan", "inf", "-inf"):
        assert "not a finite number" in text and value in text
    else:
        assert f"--{name} is {value};" in text
    where = "on the command line" if how.startswith("flag") else f"in {tmp_path / 'c.yaml'}"
    assert where in text, text
    assert "\n" not in text and "Traceback" not in text


@pytest.mark.parametrize("argv,expected", [
    (["--learning_rate", "-1e-4"], "--learning_rate is -1e-4; it must be a number > 0. Set it on the command line"),
    (["--learning_rate=-1e-4"], "--learning_rate is -1e-4; it must be a number > 0"),
    (["--learning_rate", "nan"], "--learning_rate is nan, not a finite number; it must be a number > 0"),
    (["--rank", "-3"], "--rank is -3; it must be an integer > 0"),
    (["--max_rollbacks", "-.5"], "not a valid int"),
    (["--rank", "1e999"], "--rank is 1e999, not a finite number"),
    (["--seed", str(2**32)], "--seed is 4294967296; it must be an integer in [0, 4294967295]"),
])
def test_specific_messages(argv, expected):
    with pytest.raises(UserError) as caught:
        parse_config(MIN + argv)
    assert expected in str(caught.value)


def test_yaml_negative_learning_rate_names_the_file(tmp_path):
    path = tmp_path / "neg.yaml"
    path.write_text(yaml.safe_dump({"learning_rate": -1e-4}))
    with pytest.raises(UserError, match=rf"--learning_rate is -0.0001; it must be a number > 0\. Set it in {path}"):
        parse_config(MIN + ["--config", str(path)])


@pytest.mark.parametrize("argv,field,value", [
    (["--logit_mean", "-0.5"], "logit_mean", -0.5),
    (["--logit_mean", "-1e-1"], "logit_mean", -0.1),
    (["--logit_mean", "-.25"], "logit_mean", -0.25),
    (["--mode_scale", "-2"], "mode_scale", -2.0),
    (["--max_train_steps", "1e3"], "max_train_steps", 1000),
    (["--learning_rate", "1e-4", "--rank", "4"], "learning_rate", 1e-4),
])
def test_negative_and_exponent_values_parse_as_values(argv, field, value):
    cfg = parse_config(MIN + argv)
    got = getattr(cfg.family_options, field) if owners(field) else cfg.option(field)
    assert got == value and not (isinstance(value, float) and math.isnan(value))


def test_an_unknown_flag_is_still_a_flag():
    with pytest.raises(UserError, match="Unknown option `--learnig_rate`"):
        parse_config(MIN + ["--learnig_rate", "-1e-4"])


def test_help_lists_the_range():
    text = build_argparser().format_help()
    assert "[valid: > 0]" in text and "[valid: in [0, 4294967295]]" in " ".join(text.split())


def test_a_config_made_in_code_is_checked_too():
    from dit_lora.config import TrainConfig, validate_static

    cfg = TrainConfig(pretrained_model_name_or_path="org/model", train_data_dir="d", learning_rate=float("nan"))
    with pytest.raises(UserError, match="--learning_rate is nan, not a finite number"):
        validate_static(cfg)


def test_check_data_reads_negative_values_as_values(tmp_path, capsys):
    from dit_lora.commands.cli import main

    with pytest.raises(SystemExit) as caught:
        main(["check-data", "--train_data_dir", str(tmp_path), "--max_train_samples", "-2"])
    assert caught.value.code == 2
    err = " ".join(capsys.readouterr().err.split())
    assert "--max_train_samples is -2; it must be an integer > 0" in err and "expected one argument" not in err


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


def test_an_unknown_yaml_key_gets_the_peer_hint(tmp_path):
    config = tmp_path / "run.yaml"
    config.write_text("family: sana\nsave_every_n_steps: 100\n")
    with pytest.raises(UserError, match="`save_every_n_steps` in .*--checkpointing_steps"):
        parse_config(["--config", str(config)])


def test_an_explicit_video_option_of_an_image_run_is_refused_before_the_data_check(tmp_path):
    config = tmp_path / "run.yaml"
    config.write_text("family: dit\nmax_num_frames: 49\n")
    with pytest.raises(UserError) as err:
        parse_config(["--config", str(config)])
    assert f"`max_num_frames` in {config} is an option of video families" in str(err.value)
    with pytest.raises(UserError, match=r"^--frame_buckets is an option of video families"):
        parse_config(["--family", "sana", "--frame_buckets", "49x480x720"])


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
    from dit_lora.config.parser import load_yaml

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


def test_several_unknown_flags_are_named_in_one_paragraph():
    with pytest.raises(UserError) as err:
        parse_config(["--family", "sana", "--network_dim", "8", "--network_alpha", "8", "--train_data_dir", "d"])
    text = str(err.value)
    assert text.startswith("2 unknown options on the command line:") and "--rank" in text and "--lora_alpha" in text


def test_a_list_of_resolutions_says_there_is_one_resolution_and_buckets(tmp_path):
    config = tmp_path / "run.yaml"
    config.write_text("family: sana\nresolution: [64, 96]\n")
    with pytest.raises(UserError) as err:
        parse_config(["--config", str(config), "--train_data_dir", "d"])
    text = str(err.value)
    assert "is [64, 96], which is not a valid int" in text and "--aspect_buckets" in text
    assert "ai-toolkit's list of resolutions" in text and "no dit-lora equivalent" in text


def _counting(monkeypatch) -> dict[str, int]:
    """Count the argparse passes over the run's options (the peek at --family/--config is not one) and the reads
    of YAML files."""
    import argparse

    from dit_lora.config import parser as parser_module

    counts = {"parses": 0, "yaml reads": 0}
    real_parse, real_load = argparse.ArgumentParser.parse_known_args, yaml.safe_load

    def parse(self, *args, **kwargs):
        counts["parses"] += isinstance(self, parser_module._Parser)
        return real_parse(self, *args, **kwargs)

    def load(*args, **kwargs):
        counts["yaml reads"] += 1
        return real_load(*args, **kwargs)

    monkeypatch.setattr(argparse.ArgumentParser, "parse_known_args", parse)
    monkeypatch.setattr(parser_module.yaml, "safe_load", load)
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


@pytest.mark.parametrize(
    ("name", "problem"),
    [("../up", "not a plain file name"), (".hidden", "not a plain file name"), ("a/b", "not a plain file name"),
     ("style.safetensors", "ends with .safetensors"), ("pytorch_lora_weights", "dit-lora's own files"),
     ("adapter_model_v2", "dit-lora's own files")],
)  # fmt: skip
def test_output_name_is_a_plain_file_name_of_the_users_own(name, problem):
    from dit_lora.config.parser import check_output_name
    from dit_lora.core.errors import UserError

    with pytest.raises(UserError, match=rf"--output_name `{re.escape(name)}` .*{problem}.* e\.g\. --output_name "):
        check_output_name(name)
    for good in ("my-style", "Style v2.1", "char_lora+ema"):
        check_output_name(good)
    check_output_name(None)


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
