"""families/wan/options.py: every Wan option parses from a flag and from YAML into ``cfg.family_options`` for
``--family wan`` and ``wan_i2v``; ``--validation_image`` is wan_i2v's only; another family's flag is refused."""

from __future__ import annotations

import dataclasses

import pytest
import yaml

from dit_lora.config import parse_config
from dit_lora.core.errors import UserError
from dit_lora.families.wan.options import DEMO_VARIANTS, WanI2VOptions, WanOptions

MIN = ["--pretrained_model_name_or_path", "org/model", "--train_data_dir", "data"]

#: a value other than the default for every Wan option: (flag text, YAML value, parsed value)
VALUES = {
    "timestep_sampling": ("logit_normal", "logit_normal", "logit_normal"),
    "logit_mean": ("-0.5", -0.5, -0.5),
    "logit_std": ("2.0", 2.0, 2.0),
    "allow_untrained_resolution": ("true", True, True),
    "wan_expert": ("low", "low", "low"),
    "offload_inactive_expert": ("false", False, False),
    "ti2v_image_probability": ("0.25", 0.25, 0.25),
    "flow_shift": ("5.0", 5.0, 5.0),
    "demo_wan_variant": ("2.2-t2v-a14b", "2.2-t2v-a14b", "2.2-t2v-a14b"),
    "validation_image": ("first.png", "first.png", "first.png"),
}
FIELDS = {"wan": WanOptions, "wan_i2v": WanI2VOptions}


def _names(family: str) -> list[str]:
    return [f.name for f in dataclasses.fields(FIELDS[family])]


@pytest.mark.parametrize("family", FIELDS)
def test_the_table_covers_every_option_with_a_non_default(family):
    fields = {f.name: f for f in dataclasses.fields(FIELDS[family])}
    assert set(fields) <= set(VALUES), f"add a test value for {sorted(set(fields) - set(VALUES))}"
    defaults = FIELDS[family]()
    for name in fields:
        assert getattr(defaults, name) != VALUES[name][2], name  # the parse below must change something


@pytest.mark.parametrize("how", ["flag", "yaml"])
@pytest.mark.parametrize("family", FIELDS)
def test_every_option_parses_into_family_options(family, how, tmp_path):
    names = _names(family)
    if how == "flag":
        argv = MIN + ["--family", family] + [a for n in names for a in (f"--{n}", VALUES[n][0])]
    else:
        path = tmp_path / "run.yaml"
        path.write_text(yaml.safe_dump({"family": family, **{n: VALUES[n][1] for n in names}}))
        argv = MIN + ["--config", str(path)]
    cfg = parse_config(argv)
    assert cfg.model.family == family and type(cfg.family_options) is FIELDS[family]
    assert {n: getattr(cfg.family_options, n) for n in names} == {n: VALUES[n][2] for n in names}


def test_defaults():
    opts = parse_config(MIN + ["--family", "wan"]).family_options
    assert (opts.wan_expert, opts.offload_inactive_expert, opts.ti2v_image_probability, opts.flow_shift) == (
        None, True, None, None)
    assert (opts.timestep_sampling, opts.allow_untrained_resolution, opts.demo_wan_variant) == (
        "uniform", False, "2.1-t2v")
    assert parse_config(MIN + ["--family", "wan_i2v"]).family_options.validation_image is None


def test_validation_image_is_wan_i2v_only(tmp_path):
    import re

    from dit_lora.config.owners import owners

    # every image-to-video family owns it (tests/config/test_owners.py): the paragraph names them all, wan_i2v among them
    *first, last = owners("validation_image")
    named = f"{', '.join(first)} and {last} families"
    assert "wan_i2v" in first + [last]
    with pytest.raises(UserError) as caught:
        parse_config(MIN + ["--family", "wan", "--validation_image", "a.png"])
    text = str(caught.value)
    assert text.startswith(f"--validation_image is an option of the {named}")
    assert "this run trains wan" in text and "remove --validation_image" in text and "\n" not in text
    path = tmp_path / "t2v.yaml"
    path.write_text(yaml.safe_dump({"family": "wan", "validation_image": "a.png"}))
    with pytest.raises(UserError, match=rf"`validation_image` in .*t2v\.yaml is an option of the {re.escape(named)}"):
        parse_config(MIN + ["--config", str(path)])


@pytest.mark.parametrize("family,flag,value,owner", [
    ("wan", "--noised_image_dropout", "0.1", "cogvideox_i2v"),
    ("wan_i2v", "--loss_weight_cap", "5", "cogvideox"),
    ("cogvideox", "--wan_expert", "high", "wan"),
    ("sana", "--flow_shift", "3", "wan"),
])
def test_another_familys_flag_is_refused_naming_its_owner(family, flag, value, owner):
    with pytest.raises(UserError) as caught:
        parse_config(MIN + ["--family", family, flag, value])
    text = str(caught.value)
    assert text.startswith(f"{flag} is an option of the {owner}") and f"this run trains {family}" in text
    assert f"use --family {owner}" in text and "\n" not in text


def test_another_familys_yaml_key_is_refused(tmp_path):
    path = tmp_path / "c.yaml"
    path.write_text(yaml.safe_dump({"family": "cogvideox", "wan_expert": "low"}))
    with pytest.raises(UserError, match=r"`wan_expert` in .*c\.yaml is an option of the wan and wan_i2v families; "
                                        r"this run trains cogvideox"):
        parse_config(MIN + ["--config", str(path)])


@pytest.mark.parametrize("flag,value,says", [
    ("--wan_expert", "middle", "middle"),
    ("--demo_wan_variant", "2.5-t2v", "2.5-t2v"),
    ("--ti2v_image_probability", "1.5", "--ti2v_image_probability is 1.5"),
    ("--flow_shift", "0", "--flow_shift is 0"),
])
def test_out_of_range_values_are_refused(flag, value, says):
    with pytest.raises(UserError, match=says):
        parse_config(MIN + ["--family", "wan", flag, value])


def test_demo_variants_are_the_demo_builders():
    from dit_lora.families.wan.demo import WAN_DEMO_VARIANTS

    assert tuple(DEMO_VARIANTS) == tuple(WAN_DEMO_VARIANTS)
