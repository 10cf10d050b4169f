"""`dit-lora plan`'s messages name what the command itself can do: it has no --ignore_memory_plan (a recipe flag)."""

from __future__ import annotations

import pytest
from helpers import ROOT

from dit_lora.commands.cli import _build_parser, main


def _plan(argv, capsys) -> tuple[int, str]:
    with pytest.raises(SystemExit) as caught:
        main(["plan", *argv])
    return caught.value.code, " ".join(capsys.readouterr().err.split())


def test_demo_config_before_the_demo_was_built(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)  # the demo config's relative .dit_lora_demo/ folder does not exist here
    config = ROOT / "recipes" / "configs" / "sana" / "demo.yaml"
    code, err = _plan(["--config", str(config)], capsys)
    assert code == 2
    assert "`.dit_lora_demo/tiny-sana`" in err and "does not exist yet" in err and "demo: true" in err
    assert f"dit-lora launch recipes/sana_lora.py --config {config}" in err
    assert "--ignore_memory_plan" not in err and "Traceback" not in err
    assert not (tmp_path / ".dit_lora_demo").exists()  # planning builds nothing


def test_missing_model_configs_do_not_suggest_a_recipe_flag(tmp_path, capsys):
    code, err = _plan(["--family", "sana", "--pretrained_model_name_or_path", str(tmp_path / "nowhere")], capsys)
    assert code == 2 and "The memory plan needs `transformer/config.json`" in err
    assert "pass --ignore_memory_plan" not in err


def test_check_data_reads_the_family_from_the_model_as_train_and_plan_do(tiny_dit, shape_classes, tmp_path, capsys):
    """Without --family, a DiT model's class folders are checked as DiT data (folder names are the labels), not as
    Sana images without captions."""
    with pytest.raises(SystemExit) as caught:
        main(["check-data", "--pretrained_model_name_or_path", str(tiny_dit), "--train_data_dir", str(shape_classes),
              "--cache_dir", str(tmp_path / "cache")])
    out = capsys.readouterr().out
    assert caught.value.code == 0, out
    assert "no caption" not in out and " 0 blocking" in out


def test_export_is_a_command_and_needs_a_format(tmp_path, capsys):
    with pytest.raises(SystemExit) as caught:
        main(["--help"])
    assert caught.value.code == 0 and "export" in capsys.readouterr().out
    with pytest.raises(SystemExit) as caught:
        main(["export", str(tmp_path)])
    assert caught.value.code == 2 and "--format" in capsys.readouterr().err


def test_plan_takes_the_model_as_its_first_argument(monkeypatch):
    """`dit-lora plan Wan-AI/Wan2.1-T2V-14B-Diffusers --gpu_memory 24GB` (the form users type) is the same as the
    flag; both at once is one paragraph."""
    import pytest

    from dit_lora.commands.cli import _model_argument
    from dit_lora.core.errors import UserError

    assert _model_argument(["Wan-AI/Wan2.1-T2V-14B-Diffusers", "--resolution", "512"]) == [
        "--pretrained_model_name_or_path", "Wan-AI/Wan2.1-T2V-14B-Diffusers", "--resolution", "512"]
    assert _model_argument(["--pretrained_model_name_or_path", "x"]) == ["--pretrained_model_name_or_path", "x"]
    assert _model_argument([]) == []
    with pytest.raises(UserError, match="got the model twice"):
        _model_argument(["a/b", "--pretrained_model_name_or_path", "c/d"])


def test_check_data_refuses_a_video_option_of_an_image_family(tmp_path, capsys):
    """`dit-lora check-data --family sana --frame_buckets ...` used to check the images and ignore the buckets."""
    with pytest.raises(SystemExit) as done:
        main(["check-data", "--family", "sana", "--train_data_dir", str(tmp_path), "--frame_buckets", "17x64x64"])
    assert done.value.code == 2
    assert "--frame_buckets is an option of video families" in capsys.readouterr().err


def _check_data(argv, capsys) -> tuple[int, str, str]:
    with pytest.raises(SystemExit) as done:
        main(["check-data", *argv])
    captured = capsys.readouterr()
    return done.value.code, captured.out, " ".join(captured.err.split())


def test_check_data_takes_every_data_option_of_the_schema(capsys):
    """check-data's flags come from the schema's data and video sections: a new data option is one without a change
    to the CLI (it refused --caption_extension, --instance_prompt, --dataset_split as bare argparse errors)."""
    from dit_lora.config.schema import config_fields

    with pytest.raises(SystemExit):
        main(["check-data", "--help"])
    shown = capsys.readouterr().out
    data = [f.name for f in config_fields() if f.metadata.get("section") in ("data", "video")]
    assert {"caption_extension", "instance_prompt", "instance_data_dir", "dataset_split"} <= set(data)
    for name in data:
        assert f"--{name} " in shown or f"--{name}\n" in shown, name


def test_check_data_reads_caption_extension_from_the_command_line(tmp_path, capsys):
    """kohya's `.caption` files, named by the flag as the YAML key already could."""
    from PIL import Image

    for i in range(2):
        Image.new("RGB", (64, 64), (40 * i, 90, 30)).save(tmp_path / f"img{i}.png")
        (tmp_path / f"img{i}.caption").write_text("a green square")
    code, out, err = _check_data(["--family", "sana", "--train_data_dir", str(tmp_path), "--resolution", "64",
                                  "--caption_extension", ".caption"], capsys)
    assert code == 0, err
    assert "2 sample(s): 2 ok" in out and "unrecognized" not in err


def test_check_data_unknown_flags_get_train_s_hints_in_one_paragraph(tmp_path, capsys):
    code, _, err = _check_data(["--train_data_dir", str(tmp_path), "--network_dim", "8", "--resolutoin", "64"],
                               capsys)
    assert code == 2 and "unrecognized arguments" not in err and "usage:" not in err
    assert "2 unknown options on the command line" in err and "dit-lora's option is --rank" in err
    assert "Did you mean `--resolution`?" in err and "dit-lora check-data --help" in err


def test_check_data_takes_no_abbreviation_and_gives_a_peer_s_name_its_hint(tmp_path, capsys):
    """As `train` parses: LLaMA-Factory's --dataset gets its hint (not "ambiguous option"), an abbreviation of an
    option is an unknown option with the full name offered, never silently expanded."""
    code, _, err = _check_data(["--train_data_dir", str(tmp_path), "--dataset", "mllm_video_demo"], capsys)
    assert code == 2 and "ambiguous" not in err and "dit-lora's option is --dataset_info_name" in err
    code, _, err = _check_data(["--train_data_dir", str(tmp_path), "--video_fold", str(tmp_path)], capsys)
    assert code == 2 and "Unknown option `--video_fold`" in err and "Did you mean `--video_folder`?" in err
    args, rest = _build_parser().parse_known_args(["plan", "--gpu_mem", "24GB"])
    assert args.gpu_memory is None and rest == ["--gpu_mem", "24GB"]


def test_check_data_of_video_llm_data_without_family_or_model_says_what_it_is(tmp_path, capsys):
    """Not "a file, not a folder ... images" nor "this run trains sana": the data is a video LLM's."""
    (tmp_path / "dataset_info.json").write_text("{}")
    (tmp_path / "lf.json").write_text('[{"instruction": "<video>What?", "output": "red", "videos": ["a.mp4"]}]')
    for argv in (["--train_data_dir", str(tmp_path / "lf.json")],
                 ["--train_data_dir", str(tmp_path), "--dataset_info_name", "demo"]):
        code, _, err = _check_data(argv, capsys)
        assert code == 2 and "holds video-LLM data" in err and "qwen3_vl" in err and "trains sana" not in err


def test_check_data_names_a_training_option_it_does_not_read(tmp_path, capsys):
    code, _, err = _check_data(["--train_data_dir", str(tmp_path), "--learning_rate", "1e-4"], capsys)
    assert code == 2 and "check-data does not read --learning_rate" in err and "--config" in err


@pytest.mark.parametrize("family", ["wan", "cogvideox"])
def test_check_data_of_a_video_family_without_a_model_is_one_paragraph(tmp_path, capsys, family):
    # the bucket rule comes from the model's configs: without one this ended in a TypeError traceback (exit 1)
    from data_files import make_image

    make_image(tmp_path / "a.png")
    (tmp_path / "a.txt").write_text("a picture")
    code, _, err = _check_data(["--family", family, "--train_data_dir", str(tmp_path)], capsys)
    assert code == 2 and "Traceback" not in err
    assert f"--family {family} reads its frame rule" in err and "--pretrained_model_name_or_path" in err


def test_plan_num_gpus_is_num_processes_and_json_carries_the_ladder(monkeypatch, capsys):
    """`--num_gpus` and `--num_processes` are one option; over the memory given, `--json` holds the ladder (DiT-XL/2
    narrowed to two blocks, read as the plan reads a model's configs)."""
    import json

    from plan_readers import stand_in_configs

    stand_in_configs(monkeypatch, "facebook/DiT-XL-2-256",
                     {"num_layers": 2, "num_attention_heads": 2, "attention_head_dim": 16})
    from dit_lora.commands.cli import _build_parser

    for flag in ("--num_gpus", "--num_processes"):
        args, _ = _build_parser().parse_known_args(["plan", flag, "3"])
        assert args.num_processes == 3
    with pytest.raises(SystemExit) as done:
        main(["plan", "facebook/DiT-XL-2-256", "--num_gpus", "2", "--gpu_memory", "64MB", "--json"])
    assert done.value.code == 0
    plan = json.loads(capsys.readouterr().out)
    assert plan["num_processes"] == 2 and plan["ddp_bytes"] > 0 and plan["engine"] == "ddp"
    ladder = plan["ladder"]
    assert ladder["capacity_bytes"] == 64 * 2**20 and ladder["rungs"][0]["rung"] == "as given"
    assert ladder["rungs"][0]["peak_memory_bytes"] == plan["peak_memory_bytes"] and not ladder["rungs"][0]["fits"]
    assert isinstance(ladder["flags"], list) and ladder["launch_flags"][:2] == ["--config_file",
                                                                             ladder["launch_flags"][1]]
    assert ladder["launch_flags"][1] in ("accelerate_configs/multi_gpu.yaml", "accelerate_configs/fsdp2.yaml")
    assert ladder["launch_flags"][2:] == ["--num_processes", "2"]


def test_check_data_says_what_a_run_holds_out_and_checks_the_held_out_folder(tmp_path, capsys):
    """--validation_split: the line a run logs (or its refusal); --validation_data_dir: that folder checked as the
    training data is, its BLOCK rows failing the check."""
    from PIL import Image

    data, held = tmp_path / "data", tmp_path / "held"
    for folder, count in ((data, 4), (held, 2)):
        folder.mkdir()
        for i in range(count):
            Image.new("RGB", (64, 64), (40 * i, 90, 30)).save(folder / f"img{i}.png")
            (folder / f"img{i}.txt").write_text("a green square")
    (held / "broken.png").write_bytes(b"not a png")
    (held / "broken.txt").write_text("a broken square")
    common = ["--family", "sana", "--train_data_dir", str(data), "--resolution", "64"]
    code, out, err = _check_data([*common, "--validation_split", "0.25"], capsys)
    assert code == 0, err
    assert "validation loss: 1 of 4 usable sample(s) held out (--validation_split 0.25" in out
    code, out, err = _check_data([*common, "--validation_split", "0.1"], capsys)
    assert code == 2 and "--validation_split 0.1 of the 4 usable training sample(s) holds out 0" in err
    code, out, err = _check_data([*common, "--validation_data_dir", str(held)], capsys)
    assert code == 1, err
    assert f"held-out data of the validation loss (--validation_data_dir `{held}`)" in out
    assert "broken.png" in out.split("held-out data of the validation loss")[1] and "3 sample(s): 2 ok" in out


def test_check_data_takes_a_dataset_config_in_place_of_the_recipes_folder_as_train_does(tmp_path, capsys):
    """A recipe's `train_data_dir` beside --dataset_config on the command line was refused ("both name the training
    data"); the command line's dataset config takes its place, said in one line."""
    import yaml
    from PIL import Image

    data = tmp_path / "mine"
    data.mkdir()
    for i in range(2):
        Image.new("RGB", (64, 64), (40 * i, 90, 30)).save(data / f"img{i}.png")
        (data / f"img{i}.txt").write_text("a green square")
    recipe, sets = tmp_path / "recipe.yaml", tmp_path / "sets.yaml"
    recipe.write_text(yaml.safe_dump({"family": "sana", "train_data_dir": "demo/squares", "resolution": 64}))
    sets.write_text(yaml.safe_dump({"datasets": [{"train_data_dir": str(data)}]}))
    code, out, err = _check_data(["--config", str(recipe), "--dataset_config", str(sets)], capsys)
    assert code == 0, err
    assert (f"--dataset_config on the command line takes the place of `train_data_dir: demo/squares` in `{recipe}`"
            in out)


def test_push_takes_trainings_hub_private_spelling_and_describes_itself(capsys):
    """Issue 76: `push` spelled --private where training spells --hub_private, and its --help had no description."""
    from dit_lora.commands.cli import _build_parser

    parser = _build_parser()
    for flag in ("--private", "--hub_private"):
        assert parser.parse_args(["push", "out", "--hub_model_id", "me/lora", flag]).private is True
    assert parser.parse_args(["push", "out", "--hub_model_id", "me/lora"]).private is False
    with pytest.raises(SystemExit):
        parser.parse_args(["push", "--help"])
    text = " ".join(capsys.readouterr().out.split())
    assert "Upload a finished run to a Hub model repo" in text and "--private, --hub_private" in text
