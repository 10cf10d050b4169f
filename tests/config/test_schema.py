"""config/schema.py: the common options, their ranges, and the run's family options."""

from __future__ import annotations

import pytest

from dit_lora.config.schema import POSITIVE, FamilyOptions, Range, TrainConfig, config_fields


def test_range_membership_and_text():
    assert 1 in POSITIVE and 0 not in POSITIVE and float("nan") not in Range() and float("inf") not in Range()
    assert str(Range(0, 1, high_open=True)) == "in [0, 1)" and str(POSITIVE) == "> 0" and str(Range()) == "finite"


def test_config_fields_are_the_common_options_only():
    names = [f.name for f in config_fields()]
    assert names[0] == "family" and "family_options" not in names and "rank" in names
    assert "num_classes" not in names and len(names) == len(set(names))


def test_family_options_default_to_the_familys_class():
    assert isinstance(TrainConfig().family_options, FamilyOptions)
    assert type(TrainConfig(family="dit").family_options).__name__ == "DiTOptions"
    cfg = TrainConfig.for_family("dit", num_classes=3)
    assert cfg == TrainConfig.for_family("dit", num_classes=3) and cfg != TrainConfig.for_family("dit", num_classes=4)


def test_for_family_refuses_two_different_families():
    with pytest.raises(TypeError, match="given twice"):
        TrainConfig.for_family("dit", family="sana")


def test_instance_data_dir_is_train_data_dir_and_both_is_one_paragraph():
    from dit_lora.errors import UserError

    cfg = TrainConfig(instance_data_dir="dogs")
    assert cfg.train_data_dir == "dogs" and cfg.instance_data_dir is None
    assert TrainConfig(instance_data_dir="dogs", train_data_dir="dogs").train_data_dir == "dogs"
    with pytest.raises(UserError, match="--instance_data_dir is diffusers' name for --train_data_dir"):
        TrainConfig(instance_data_dir="dogs", train_data_dir="cats")
