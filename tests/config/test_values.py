"""config/values.py: an option's declared type, a value coerced to it, its range, and the unknown-option paragraphs
(the parser's flags and YAML keys go through these; tests/config/test_parser.py checks them end to end)."""

from __future__ import annotations

import pytest

from dit_lora.config.values import (base_type, check_value, coerce, field_type, range_message, unknown_message,
                                    unknown_options_message)
from dit_lora.core.errors import UserError


def test_a_value_is_coerced_to_the_declared_type_of_its_option():
    assert coerce("rank", "8", "--rank") == 8 and coerce("rank", "1e3", "--rank") == 1000
    assert coerce("learning_rate", "2e-4", "--learning_rate") == 2e-4
    assert coerce("gradient_checkpointing", "yes", "--gradient_checkpointing") is True
    assert coerce("lora_layers", "to_k, to_q", "--lora_layers") == ["to_k", "to_q"]
    assert coerce("num_classes", "none", "--num_classes") is None  # a family's optional option


def test_a_wrong_value_names_the_option_the_source_and_the_type():
    with pytest.raises(UserError, match=r"`rank` in run.yaml is '2.5', which is not a valid int"):
        coerce("rank", "2.5", "run.yaml")
    with pytest.raises(UserError, match=r"`mixed_precision` in --mixed_precision is `bf15`.*Did you mean `bf16`"):
        coerce("mixed_precision", "bf15", "--mixed_precision")


def test_a_number_outside_its_range_is_one_paragraph_with_the_value_as_written():
    assert range_message("rank", 8) is None
    assert range_message("learning_rate", -1e-4, "--learning_rate", "-1e-4").startswith(
        "--learning_rate is -1e-4; it must be a number > 0")
    with pytest.raises(UserError, match="not a finite number"):
        check_value("learning_rate", float("nan"), None)


def test_the_declared_type_of_an_optional_option_is_its_inner_type():
    assert base_type(field_type("num_classes")) == (int, True)
    assert base_type(field_type("rank")) == (int, False)


def test_unknown_options_get_a_hint_each_in_one_paragraph():
    one = unknown_message("--learnig_rate", ["learning_rate", "rank"], "on the command line")
    assert one.startswith("Unknown option `--learnig_rate` on the command line. Did you mean `--learning_rate`?")
    several = unknown_options_message(["--network_dim", "--learnig_rate"], ["learning_rate", "rank"],
                                      "on the command line")
    assert several.startswith("2 unknown options on the command line:") and "--rank" in several
