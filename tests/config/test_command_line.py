"""config/command_line.py: one --flag per option with its help, default and range; a negative number after a flag
is its value (argparse takes ``-1e-4`` for an unknown flag); an unknown flag stays a flag."""

from __future__ import annotations

import math

import pytest

from dit_lora.config import parse_config
from dit_lora.config.command_line import build_argparser
from dit_lora.config.owners import owners
from dit_lora.config.schema import config_fields
from dit_lora.core.errors import UserError

MIN = ["--pretrained_model_name_or_path", "org/model", "--train_data_dir", "data"]


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


def test_check_data_reads_negative_values_as_values(tmp_path, capsys):
    from dit_lora.commands.cli import main

    with pytest.raises(SystemExit) as caught:
        main(["check-data", "--train_data_dir", str(tmp_path), "--max_train_samples", "-2"])
    assert caught.value.code == 2
    err = " ".join(capsys.readouterr().err.split())
    assert "--max_train_samples is -2; it must be an integer > 0" in err and "expected one argument" not in err


def test_every_field_documented_and_in_help(capsys):
    with pytest.raises(SystemExit):
        parse_config(["--help"])
    text = capsys.readouterr().out
    for f in config_fields():
        assert f.metadata["help"].strip(), f.name
        assert f"--{f.name}" in text
    assert "(default: 16)" in text  # rank's default is shown
