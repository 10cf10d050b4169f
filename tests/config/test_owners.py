"""config/owners.py: every option has one owner (common or a family's options), and the parser holds a run to the
common options plus its own family's: another family's flag or YAML key is one paragraph naming its owner."""

from __future__ import annotations

from dataclasses import fields

import pytest

from dit_lora.config import parse_config
from dit_lora.config.owners import (common_names, family_fields, find_field, foreign_option_message,
                                    known_families, options_class, owners, register_options, unregister_options)
from dit_lora.config.command_line import build_argparser
from dit_lora.config.schema import FamilyOptions, TrainConfig, config_fields
from dit_lora.core.errors import UserError
from dit_lora.registry import available

MIN = ["--pretrained_model_name_or_path", "org/model", "--train_data_dir", "data"]


def test_owners_are_exclusive():
    """No option is both common and a family's; a name two families share is one field (a shared group)."""
    common = common_names()
    declared: dict[str, object] = {}
    for family in known_families():
        for f in family_fields(family):
            assert f.name not in common, f"--{f.name} is common and an option of {family}"
            assert declared.setdefault(f.name, f) is f, f"--{f.name} is declared twice: share one group instead"
    assert "family_options" not in {f.name for f in config_fields()}


#: the shared option groups whose owners are checked against what each family states it owns (its ``SHARED_OPTIONS``
#: in tests/families/<package>/cases.py): one flag, one meaning, its families
SHARED_GROUPS = ("logit_mean", "weighting_scheme", "validation_image", "complex_human_instruction")


def test_the_split_moves_single_family_options_out_of_the_common_ones():
    assert {"num_classes", "first_frame_noise", "use_liger_kernel", "complex_human_instruction"}.isdisjoint(
        common_names())
    assert owners("num_classes") == ["dit"] and owners("first_frame_noise") == ["cogvideox_i2v"]
    assert owners("cond_image_column") == ["flux_kontext"] and owners("flux_shift") == ["flux", "flux_kontext"]
    assert owners("wan_expert") == ["wan", "wan_i2v"] and owners("rank") == []
    assert find_field("num_frames")[0].metadata["help"].startswith("Video LLMs:")


@pytest.mark.parametrize("option", SHARED_GROUPS)
def test_a_shared_group_is_owned_by_the_families_that_state_it(option):
    """A shared group's flag (the timestep density, the conditioning image of validation samples, ...) belongs to
    exactly the names whose family states it: a new family says which groups it reads, or fails here naming it."""
    from family_cases import case

    stated = {name for name in available()
              if option in case(name, "SHARED_OPTIONS", "tests/config/test_owners.py", per_name=True)}
    assert stated, option
    assert set(owners(option)) == stated, (sorted(set(owners(option)) - stated), sorted(stated - set(owners(option))))


def test_every_family_states_its_shared_groups_and_only_those_checked_here():
    from family_cases import case

    for name in available():
        stated = case(name, "SHARED_OPTIONS", "tests/config/test_owners.py", per_name=True)
        assert set(stated) <= set(SHARED_GROUPS), (name, sorted(set(stated) - set(SHARED_GROUPS)))


@pytest.mark.parametrize("family", available())
def test_each_familys_own_flags_parse_into_family_options(family):
    own = family_fields(family)
    assert own, family
    argv = MIN + ["--family", family]
    for f in own:  # each flag given with a value other than its default where the type allows it
        if f.type == "bool":
            argv += [f"--{f.name}", str(not f.default).lower()]
    cfg = parse_config(argv)
    assert type(cfg.family_options) is options_class(family)
    for f in own:
        if f.type == "bool":
            assert getattr(cfg.family_options, f.name) is (not f.default), f.name
            assert f.name in cfg.explicit_options


def test_another_familys_flag_is_refused_naming_its_owner():
    for argv in (["--num_classes", "10"], ["--num_classes=10"]):
        with pytest.raises(UserError) as caught:
            parse_config(MIN + ["--family", "sana"] + argv)
        text = str(caught.value)
        assert text.startswith("--num_classes is an option of the dit family; this run trains sana (--family)")
        assert "--family dit" in text and "\n" not in text
    with pytest.raises(UserError, match="option of the cogvideox_i2v family; this run trains cogvideox"):
        parse_config(MIN + ["--family", "cogvideox", "--first_frame_noise", "false"])
    with pytest.raises(UserError, match=r"--complex_human_instruction is an option of the sana, sanavideo and sanavideo_i2v families; this run trains"):
        parse_config(MIN + ["--family", "dit", "--complex_human_instruction", "false"])
    with pytest.raises(UserError, match=r"--weighting_scheme is an option of the sana, qwenimage, .* families"):
        parse_config(MIN + ["--family", "dit", "--weighting_scheme", "none"])


def test_an_unknown_flag_keeps_its_suggestion():
    with pytest.raises(UserError, match=r"Unknown option `--num_clases`.*Did you mean `--num_classes`"):
        parse_config(MIN + ["--family", "dit", "--num_clases", "3"])


def test_yaml_with_another_familys_key_is_refused(tmp_path):
    path = tmp_path / "run.yaml"
    path.write_text("family: sana\nnum_frames: 4\n")
    with pytest.raises(UserError) as caught:
        parse_config(MIN + ["--config", str(path)])
    text = str(caught.value)
    from dit_lora.families.videollm import MODEL_CLASSES

    *first, last = MODEL_CLASSES  # every video-LLM family owns num_frames, however many there are
    assert text.startswith(f"`num_frames` in {path} is an option of the {', '.join(first)} and {last} families")
    assert f"this run trains sana (`family:` in {path})" in text and f"remove `num_frames` from {path}" in text
    # the same key with the YAML naming its family parses; the command line's --family wins over the YAML
    path.write_text("family: qwen2_5_vl\nnum_frames: 4\n")
    assert parse_config(MIN + ["--config", str(path)]).family_options.num_frames == 4
    with pytest.raises(UserError, match=r"this run trains dit \(--family\)"):
        parse_config(MIN + ["--config", str(path), "--family", "dit"])


def test_help_shows_the_common_options_and_only_the_familys_own():
    text = build_argparser("dit_class_lora.py", "dit").format_help()
    assert "dit options (--family dit):" in text and "--num_classes" in text
    assert "--rank" in text and "--learning_rate" in text
    for other in ("--num_frames", "--first_frame_noise", "--weighting_scheme", "--complex_human_instruction"):
        assert other not in text, other
    sana = build_argparser("sana_lora.py", "sana").format_help()
    assert "--weighting_scheme" in sana and "--num_classes" not in sana


def test_recipe_help_lists_its_family(capsys):
    with pytest.raises(SystemExit):
        parse_config(["--family", "cogvideox_i2v", "--help"])
    text = capsys.readouterr().out
    assert "cogvideox_i2v options" in text and "--first_frame_noise" in text and "--loss_weight_cap" in text
    assert "--num_classes" not in text


def test_for_family_puts_each_keyword_where_it_belongs():
    cfg = TrainConfig.for_family("dit", num_classes=10, resolution=64)
    assert cfg.model.family == "dit" and cfg.data.resolution == 64 and cfg.family_options.num_classes == 10
    assert TrainConfig.for_family(family="qwen2_5_vl", num_frames=4).family_options.num_frames == 4
    assert TrainConfig.for_family(rank=8).model.family == "sana"
    with pytest.raises(UserError, match="--num_classes is an option of the dit family; this run trains sana"):
        TrainConfig.for_family("sana", num_classes=10)
    with pytest.raises(UserError, match="not an option"):
        TrainConfig.for_family("sana", no_such_option=1)


def test_family_options_are_typed_per_family():
    assert type(TrainConfig().family_options) is options_class("sana")
    assert type(TrainConfig(family="cogvideox_i2v").family_options).__name__ == "CogVideoXI2VOptions"
    with pytest.raises(TypeError, match="must be a DiTOptions"):
        TrainConfig(family="dit", family_options=options_class("sana")())
    assert type(TrainConfig(family="not-a-family").family_options) is FamilyOptions  # get_family says the rest


def test_a_config_made_in_code_checks_the_familys_ranges_too():
    from dit_lora.config import validate_static

    cfg = TrainConfig.for_family("dit", pretrained_model_name_or_path="m", train_data_dir="d", num_classes=0)
    with pytest.raises(UserError, match="--num_classes is 0; it must be an integer > 0"):
        validate_static(cfg)


def test_a_family_registered_elsewhere_declares_its_options():
    from dataclasses import dataclass

    from dit_lora.config.schema import opt

    @dataclass(frozen=True)
    class ToyOptions(FamilyOptions):
        TITLE = "toy options"
        toy_strength: float = opt(0.5, "Toy: strength.", section="toy")

    register_options("toy", ToyOptions)
    try:
        assert owners("toy_strength") == ["toy"] and "toy" in known_families()
        assert TrainConfig.for_family("toy", toy_strength=0.25).family_options.toy_strength == 0.25
        assert "toy options:" in build_argparser("toy_lora.py", "toy").format_help()
        assert foreign_option_message("toy_strength", "sana", "--toy_strength", "--family").startswith(
            "--toy_strength is an option of the toy family")
    finally:
        unregister_options("toy")
    assert owners("toy_strength") == [] and "toy_strength" not in {f.name for f in config_fields()}


def test_help_before_the_family_is_inferred_lists_the_inferred_familys_options(capsys):
    """A recipe's --help (no --family, no config): the family comes from infer_family, and so do the options."""
    with pytest.raises(SystemExit):
        parse_config(["--help"], infer_family=lambda common: "dit")
    text = capsys.readouterr().out
    assert "dit options (--family dit):" in text and "--weighting_scheme" not in text


def test_another_familys_option_of_a_purpose_this_family_spells_otherwise_names_this_familys():
    """--weighting_scheme on Z-Image (whose density is --timestep_sampling), --timestep_sampling on FLUX.2 (whose is
    --weighting_scheme), --flux2_shift on Z-Image (--flow_shift): the family's own option, not another family."""
    from dit_lora.config.owners import counterpart, foreign_option_message

    text = foreign_option_message("weighting_scheme", "zimage", "--weighting_scheme", "--family")
    assert "whose option for the same purpose is --timestep_sampling" in text and "use --family" not in text
    assert counterpart("timestep_sampling", "flux2") == "weighting_scheme"
    assert counterpart("flux2_shift", "zimage") == "flow_shift" and counterpart("flow_shift", "qwenimage") == (
        "qwen_fixed_shift")
    assert counterpart("num_classes", "zimage") is None
    assert "To train dit, use --family dit" in foreign_option_message("num_classes", "zimage", "--num_classes", "x")
