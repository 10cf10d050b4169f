"""``dit_lora/commands/recipe.py``: the family a run trains is decided one way for ``dit-lora train`` and the recipe scripts.

``--family`` wins, then the config's ``family:``, then the recipe script's own family (``dit-lora train``: the
model's); a recipe refuses a family its registry entry does not train. The runs themselves are in
tests/test___main__.py (``python -m dit_lora train``) and every recipe test of tests/e2e/.
"""

from __future__ import annotations

import pytest
import yaml

from dit_lora.core.errors import UserError
from dit_lora.config import TrainConfig
from dit_lora.commands.recipe import choose_family, parse_run

SANA_HUB_ID = "Efficient-Large-Model/Sana_600M_1024px_diffusers"  # catalogued: its family needs no download


def _args(tmp_path, *extra, model=None):
    return ["--pretrained_model_name_or_path", str(model or tmp_path), "--train_data_dir", str(tmp_path),
            "--output_dir", str(tmp_path / "out"), *extra]


def _yaml(tmp_path, **values) -> str:
    path = tmp_path / "run.yaml"
    path.write_text(yaml.safe_dump(values))
    return str(path)


@pytest.mark.parametrize("recipe, family", [("sana", "sana"), ("cogvideox", "cogvideox"), ("dit", "dit"),
                                            ("llava_next_video", "llava_next_video")])
def test_a_recipe_trains_its_own_family_unless_told(tmp_path, recipe, family):
    from dit_lora.config.owners import options_class

    cfg = parse_run(_args(tmp_path), recipe)
    assert cfg.model.family == family and type(cfg.family_options) is options_class(family)


def test_the_flag_then_the_config_name_another_family_of_the_same_entry(tmp_path):
    config = _yaml(tmp_path, family="cogvideox_i2v")
    assert parse_run(_args(tmp_path, "--config", config), "cogvideox").model.family == "cogvideox_i2v"
    assert parse_run(_args(tmp_path, "--config", config, "--family", "cogvideox"), "cogvideox").model.family == "cogvideox"
    assert parse_run(_args(tmp_path, "--family", "qwen2_5_vl"), "llava_next_video").model.family == "qwen2_5_vl"


def test_a_recipe_refuses_another_entry_s_family_before_checking_options(tmp_path):
    """No model, no data, and another family's flag: the family mismatch is what the user hears first."""
    config = _yaml(tmp_path, family="dit", num_classes=3)
    with pytest.raises(UserError, match=r"This recipe trains `sana` but .* `dit`\. Use recipes/dit_class_lora.py "
                                        r"\(or `dit-lora train`\)"):
        parse_run(["--config", config], "sana")
    with pytest.raises(UserError, match=r"trains `cogvideox` or `cogvideox_i2v` but .* `sana`"):
        parse_run(["--family", "sana"], "cogvideox")


def test_an_unknown_family_is_one_paragraph_with_a_suggestion(tmp_path):
    for recipe in ("sana", None):
        with pytest.raises(UserError, match=r"is `cogvidex`, which is not one of chroma, cogvideox, .*Did you mean `cogvideox"):
            parse_run(_args(tmp_path, "--family", "cogvidex"), recipe)


def test_dit_lora_train_reads_the_family_from_the_config_else_the_model(tmp_path):
    assert parse_run(_args(tmp_path, "--config", _yaml(tmp_path, family="dit"))).model.family == "dit"
    assert parse_run(_args(tmp_path, model=SANA_HUB_ID)).model.family == "sana"
    (tmp_path / "model_index.json").write_text('{"_class_name": "CogVideoXImageToVideoPipeline"}')
    assert parse_run(_args(tmp_path)).model.family == "cogvideox_i2v"
    # the message of another family's option says what chose the family
    with pytest.raises(UserError, match=r"this run trains sana \(the model's family\)"):
        parse_run(_args(tmp_path, "--num_classes", "3", model=SANA_HUB_ID))
    with pytest.raises(UserError, match=r"this run trains sana \(the family of sana_lora.py\)"):
        parse_run(_args(tmp_path, "--num_classes", "3"), "sana")


def test_dit_lora_train_stops_when_nothing_names_the_family(tmp_path):
    (tmp_path / "model_index.json").write_text('{"_class_name": "StableDiffusion3Pipeline"}')
    with pytest.raises(UserError, match=r"is a StableDiffusion3Pipeline \(model_index.json\), which no dit-lora family trains.* --family cogvideox/cogvideox_i2v: "):
        parse_run(_args(tmp_path))
    with pytest.raises(UserError, match="No model given"):
        parse_run(["--train_data_dir", str(tmp_path)])
    # video-LLM data (LLaMA-Factory's dataset_info.json folder or entries, VideoChat2's) is said to be so, with
    # what picks its trainer; not "a local diffusers folder"
    (tmp_path / "dataset_info.json").write_text("{}")
    (tmp_path / "lf.json").write_text('[{"messages": [], "videos": ["a.mp4"]}]')
    (tmp_path / "vc2.jsonl").write_text('{"video": "a.mp4", "QA": []}\n')
    for data, what in ((tmp_path, "LLaMA-Factory.s dataset_info.json"), (tmp_path / "lf.json", "LLaMA-Factory entries"),
                       (tmp_path / "vc2.jsonl", "VideoChat2/chat annotations")):
        with pytest.raises(UserError, match=rf"holds video-LLM data \({what}.*--pretrained_model_name_or_path"):
            parse_run(["--train_data_dir", str(data), "--dataset_info_name", "x"])
    with pytest.raises(UserError, match=r"needs to know which model family it trains: pass --family \(chroma, cogvideox, .*"
                                        r"`dit-lora train --family NAME --help`"):
        choose_family()(TrainConfig().model)


def test_a_config_that_cannot_be_read_is_reported_by_the_parser(tmp_path):
    (tmp_path / "bad.yaml").write_text("family: [unclosed\n")
    for recipe in ("sana", None):
        with pytest.raises(UserError, match="is not valid YAML"):
            parse_run(_args(tmp_path, "--config", str(tmp_path / "bad.yaml")), recipe)


def test_train_help_without_a_family_prints_the_common_options_and_the_families(capsys):
    """`dit-lora train --help` and `-h` exited 2 ("needs to know which model family"); now a help page, exit 0."""
    from dit_lora.registry import available
    from dit_lora.commands.recipe import parse_run

    for flag in ("--help", "-h"):
        with pytest.raises(SystemExit) as done:
            parse_run([flag])
        assert done.value.code == 0
        out = capsys.readouterr().out
        assert "--learning_rate" in out and "video:" in out and "--flow_shift" not in out
        assert all(f"  {name} " in out for name in available()) and "SanaPipeline" in out
        assert "--family NAME --help" in out


def test_train_help_of_one_family_adds_its_options(capsys):
    from dit_lora.commands.recipe import parse_run

    with pytest.raises(SystemExit) as done:
        parse_run(["--family", "wan", "--help"])
    assert done.value.code == 0
    out = capsys.readouterr().out
    assert "--flow_shift" in out and "WanPipeline" in out and "[video families only]" in out
