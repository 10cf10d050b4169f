"""config/schema.py: the common options and the run's family options (ranges: tests/config/test_option.py)."""

from __future__ import annotations

import pytest

from dit_lora.config.schema import FamilyOptions, TrainConfig, config_fields


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


def test_every_option_is_classified_for_resume_where_it_is_declared():
    """A new option (common, or any registered family's) must say whether a resume may change it."""
    from dataclasses import fields

    from dit_lora.config.owners import options_class
    from dit_lora.config.schema import resume_class
    from dit_lora.registry import available

    declared = [("common", f) for f in config_fields()]
    declared += [(family, f) for family in available() for f in fields(options_class(family))]
    unclassified = [f"{owner}: {f.name}" for owner, f in declared if resume_class(f) not in ("fixed", "free")]
    assert not unclassified, f"declare opt(..., resume='fixed'|'free') for {unclassified}"
    common = {f.name: resume_class(f) for f in config_fields()}
    assert common["lora_alpha"] == common["train_batch_size"] == common["seed"] == common["resolution"] == "fixed"
    assert common["learning_rate"] == common["max_train_steps"] == common["validation_steps"] == "free"
    assert common["train_data_dir"] == "free"  # judged by the data set's fingerprint, not by its path


def test_instance_data_dir_is_train_data_dir_and_both_is_one_paragraph():
    from dit_lora.core.errors import UserError

    cfg = TrainConfig(instance_data_dir="dogs")
    assert cfg.data.train_data_dir == "dogs" and cfg.data.instance_data_dir is None
    assert TrainConfig(instance_data_dir="dogs", train_data_dir="dogs").data.train_data_dir == "dogs"
    with pytest.raises(UserError, match="--instance_data_dir is diffusers' name for --train_data_dir"):
        TrainConfig(instance_data_dir="dogs", train_data_dir="cats")


def test_lora_layers_take_diffusers_comma_separated_string():
    # diffusers' examples: --lora_layers "to_k,to_q,to_v"; it was one entry that matched no layer
    cfg = TrainConfig.for_family("sana", lora_layers=["to_k,to_q, to_v"])
    assert cfg.lora.lora_layers == ["to_k", "to_q", "to_v"]
    assert TrainConfig.for_family("sana", lora_layers=["to_k", "to_q"]).lora.lora_layers \
        == ["to_k", "to_q"]


def test_every_family_options_class_is_frozen_like_the_rest_of_the_config():
    """A resolved config is frozen, its family's options included: a changed copy is dataclasses.replace."""
    import dataclasses

    from dit_lora.config.owners import known_families, options_class

    for family in known_families():
        cls = options_class(family)
        assert cls.__dataclass_params__.frozen, f"{cls.__qualname__} of family {family} is not frozen"
    options = TrainConfig.for_family("dit", num_classes=10).family_options
    with pytest.raises(dataclasses.FrozenInstanceError):
        options.num_classes = 3
    assert dataclasses.replace(options, num_classes=3).num_classes == 3


def test_is_set_reads_the_parsers_record_else_what_is_off_its_default():
    """A config built in code counts an option off its default (common or the family's) as set; a parsed one counts
    what the user named, even at its default value."""
    cfg = TrainConfig.for_family("flux2", flux2_train_guidance=3.5, rank=4)
    assert cfg.is_set("flux2_train_guidance") and cfg.is_set("rank") and cfg.is_set("family")
    assert not cfg.is_set("flux2_shift") and not cfg.is_set("lora_alpha") and not cfg.is_set("lora_layers")
    named = TrainConfig.for_family("flux2", explicit=frozenset({"flux2_shift"}), flux2_train_guidance=3.5)
    assert named.is_set("flux2_shift") and not named.is_set("flux2_train_guidance")
    assert not TrainConfig().is_set("family")
    with pytest.raises(KeyError):
        cfg.is_set("no_such_option")


def test_init_lora_weights_with_a_file_is_network_weights_and_a_peft_scheme_is_refused():
    import pytest

    from dit_lora.config import parse_config
    from dit_lora.core.errors import UserError

    base = ["--family", "sana", "--train_data_dir", "/data", "--pretrained_model_name_or_path", "me/model"]
    cfg = parse_config([*base, "--init_lora_weights", "/loras/mine.safetensors"])
    assert cfg.lora.network_weights == "/loras/mine.safetensors" and cfg.lora.init_lora_weights is None
    same = parse_config([*base, "--init_lora_weights", "a.safetensors", "--network_weights", "a.safetensors"])
    assert same.lora.network_weights == "a.safetensors"
    with pytest.raises(UserError, match="initialisation schemes"):
        parse_config([*base, "--init_lora_weights", "pissa"])
    with pytest.raises(UserError, match="Give one of them"):
        parse_config([*base, "--init_lora_weights", "a.safetensors", "--network_weights", "b.safetensors"])
