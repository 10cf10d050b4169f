"""dit_lora.config.run_sections: how a run goes (training, checkpoints, validation, hub, guards, kernels, misc)."""

from __future__ import annotations

import ast
from dataclasses import fields
from pathlib import Path

from dit_lora.config import run_sections, schema
from dit_lora.config.option import SECTION_RESUME
from dit_lora.config.sections import SECTIONS


def imported_modules(module) -> set[str]:
    """The modules ``module``'s source imports (``from x import`` and ``import x``)."""
    tree = ast.parse(Path(module.__file__).read_text(encoding="utf-8"))
    imported = {n.module or "" for n in ast.walk(tree) if isinstance(n, ast.ImportFrom)}
    return imported | {a.name for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names}


RUN_SECTIONS = ("training", "checkpoints", "validation", "hub", "guards", "kernels", "misc")


def test_run_sections_import_only_the_declaration_helpers_of_config():
    """The declaration helpers, and the optimizer table (--optimizer's choices, default and help)."""
    config = {m for m in imported_modules(run_sections) if m.startswith("dit_lora.config")}
    assert config == {"dit_lora.config.option", "dit_lora.config.optimizers"}


def test_schema_re_exports_the_run_sections():
    for name in RUN_SECTIONS:
        cls = SECTIONS[name][0]
        assert getattr(schema, cls.__name__) is cls
    assert schema.LR_SCHEDULERS is run_sections.LR_SCHEDULERS and schema.REPORT_TO is run_sections.REPORT_TO


def test_each_field_names_its_own_section_and_the_section_a_resume_class():
    for name in RUN_SECTIONS:
        cls = SECTIONS[name][0]
        assert cls.__module__ == run_sections.__name__
        assert {f.metadata["section"] for f in fields(cls)} == {name}
        assert SECTION_RESUME[name] == "free"


# ---- several validation prompts ----------------------------------------------------------------------------------
MODEL_AND_DATA = ["--family", "sana", "--pretrained_model_name_or_path", "me/model", "--train_data_dir", "/data"]


def test_validation_prompt_given_more_than_once_keeps_every_prompt_in_order():
    from dit_lora.config import parse_config

    cfg = parse_config([*MODEL_AND_DATA, "--validation_prompt", "a cat", "--validation_prompt", "a dog, at noon"])
    assert cfg.validation.prompts == ["a cat", "a dog, at noon"]
    assert cfg.validation.validation_prompt == "a cat:::a dog, at noon"  # one text, as a single flag gives it
    one = parse_config([*MODEL_AND_DATA, "--validation_prompt", "a cat, at dusk"])
    assert one.validation.prompts == ["a cat, at dusk"] and one.validation.validation_prompt == "a cat, at dusk"


def test_diffusers_separator_and_a_yaml_list_give_the_same_prompts(tmp_path):
    import yaml

    from dit_lora.config import parse_config

    split = parse_config([*MODEL_AND_DATA, "--validation_prompt", "a cat ::: a dog"])
    own = parse_config([*MODEL_AND_DATA, "--validation_prompt", "a cat | a dog", "--validation_prompt_separator", "|"])
    config = tmp_path / "run.yaml"
    config.write_text(yaml.safe_dump({"validation_prompt": ["a cat", "a dog"]}))
    listed = parse_config(["--config", str(config), *MODEL_AND_DATA])
    assert split.validation.prompts == own.validation.prompts == listed.validation.prompts == ["a cat", "a dog"]
    flag_wins = parse_config(["--config", str(config), *MODEL_AND_DATA, "--validation_prompt", "a fox"])
    assert flag_wins.validation.prompts == ["a fox"]


def test_one_prompt_is_what_a_family_reads_for_each_prompt():
    validation = schema.ValidationOptions(validation_prompt=["a cat", "a dog"])
    assert [validation.one_prompt(p).validation_prompt for p in validation.prompts] == ["a cat", "a dog"]
    assert [validation.one_prompt(p).prompts for p in validation.prompts] == [["a cat"], ["a dog"]]
    assert schema.ValidationOptions().prompts == []


def test_a_prompt_holding_the_separator_or_an_empty_one_is_refused_in_one_paragraph():
    import pytest

    from dit_lora.config import parse_config
    from dit_lora.core.errors import UserError

    with pytest.raises(UserError) as err:
        parse_config([*MODEL_AND_DATA, "--validation_prompt", "a:::b", "--validation_prompt", "c"])
    assert "'a:::b'" in str(err.value) and "--validation_prompt_separator" in str(err.value)
    with pytest.raises(UserError, match="one of them empty"):
        parse_config([*MODEL_AND_DATA, "--validation_prompt", "a cat", "--validation_prompt", " "])
    with pytest.raises(UserError, match="separator is empty"):
        schema.ValidationOptions(validation_prompt=["a", "b"], validation_prompt_separator="")
