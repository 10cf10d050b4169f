"""config/checks.py: every numeric option is finite and in its range at parse time, however it was given; the
options that exclude or need each other; the output name.

Each numeric field of :class:`TrainConfig` declares its range next to itself (``valid=`` in the schema); a value
outside it, NaN or an infinity stops the parse with one paragraph naming the option, the value as written, the
range and where it came from: ``--x v``, ``--x=v`` or a YAML file.
"""

from __future__ import annotations

import re

import pytest
import yaml

from dit_lora.config import parse_config
from dit_lora.config.owners import all_option_names, find_field, owners
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


def test_a_config_made_in_code_is_checked_too():
    from dit_lora.config import TrainConfig
    from dit_lora.config.checks import validate_static

    cfg = TrainConfig(pretrained_model_name_or_path="org/model", train_data_dir="d", learning_rate=float("nan"))
    with pytest.raises(UserError, match="--learning_rate is nan, not a finite number"):
        validate_static(cfg)


def test_push_later_ok_without_push_to_hub_is_refused(tmp_path):
    with pytest.raises(UserError) as err:
        parse_config(MIN + ["--push_later_ok"])
    assert str(err.value).startswith("--push_later_ok only says what --push_to_hub does")
    assert "Add --push_to_hub (with --hub_model_id)" in str(err.value) and "drop --push_later_ok" in str(err.value)
    config = tmp_path / "c.yaml"
    config.write_text("push_later_ok: true\n")  # a YAML config is checked the same way
    with pytest.raises(UserError, match="--push_to_hub is off"):
        parse_config(["--config", str(config)] + MIN)
    cfg = parse_config(MIN + ["--push_later_ok", "--push_to_hub", "--hub_model_id", "me/lora"])
    assert cfg.hub.push_later_ok and cfg.hub.push_to_hub


def test_data_source_must_be_exactly_one():
    with pytest.raises(UserError, match="exactly one data source"):
        parse_config(["--pretrained_model_name_or_path", "org/model"])  # neither was given
    with pytest.raises(UserError, match="both were given"):
        parse_config(MIN + ["--dataset_name", "x/y"])


def test_fp16_allowed_only_on_request():
    import torch

    argv = MIN + ["--mixed_precision", "fp16", "--allow_fp16"]
    if torch.cuda.is_available():
        assert parse_config(argv).training.mixed_precision == "fp16"
    else:
        with pytest.raises(UserError, match="needs a CUDA GPU"):
            parse_config(argv)


@pytest.mark.parametrize(
    ("name", "problem"),
    [("../up", "not a plain file name"), (".hidden", "not a plain file name"), ("a/b", "not a plain file name"),
     ("style.safetensors", "ends with .safetensors"), ("pytorch_lora_weights", "dit-lora's own files"),
     ("adapter_model_v2", "dit-lora's own files")],
)  # fmt: skip
def test_output_name_is_a_plain_file_name_of_the_users_own(name, problem):
    from dit_lora.config.checks import check_output_name

    with pytest.raises(UserError, match=rf"--output_name `{re.escape(name)}` .*{problem}.* e\.g\. --output_name "):
        check_output_name(name)
    for good in ("my-style", "Style v2.1", "char_lora+ema"):
        check_output_name(good)
    check_output_name(None)
