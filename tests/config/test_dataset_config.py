"""config/dataset_config.py: a dataset config (``--dataset_config``, or ``datasets:`` in the ``--config`` YAML) is read
once at setup and held by the run's config; its sets are judged against the run's options (a data source beside
them, a set option the family never reads, prior preservation), every mistake one paragraph naming the file, the set
and the key. (Reading the file: tests/config/test_dataset_file.py.)"""

from __future__ import annotations

import dataclasses

import pytest
import yaml

from dit_lora.config import parse_config
from dit_lora.core.errors import UserError

MODEL = ["--pretrained_model_name_or_path", "org/model"]


def _write(tmp_path, sets, name="sets.yaml", **top):
    path = tmp_path / name
    path.write_text(yaml.safe_dump({**top, "datasets": sets}))
    return path


# ---- through the parser ------------------------------------------------------------------------------------------
def test_datasets_in_the_run_config_are_its_dataset_config(tmp_path):
    run = tmp_path / "run.yaml"
    run.write_text(yaml.safe_dump({"family": "sana", "pretrained_model_name_or_path": "org/model", "resolution": 512,
                                   "datasets": [{"train_data_dir": "a"}, {"train_data_dir": "b", "resolution": 256}]}))
    cfg = parse_config(["--config", str(run)])
    assert cfg.data.dataset_config == str(run) and cfg.data.train_data_dir is None
    a, b = cfg.data_sets.sets  # read once, by the parser
    assert "resolution" not in a.options and b.options["resolution"] == 256  # the run's own 512 is a's default


def test_a_standalone_file_holds_only_its_sets(tmp_path):
    path = _write(tmp_path, [{"train_data_dir": "a"}], resolution=512)
    with pytest.raises(UserError, match="top-level key.*`resolution`.*under `general:`"):
        parse_config([*MODEL, "--family", "sana", "--dataset_config", str(path)])
    fine = _write(tmp_path, [{"train_data_dir": "a"}], name="fine.yaml", general={"resolution": 512})
    cfg = parse_config([*MODEL, "--family", "sana", "--dataset_config", str(fine)])
    assert cfg.data.dataset_config == str(fine)


def test_a_data_folder_beside_the_sets_at_one_level_is_refused_naming_the_fix(tmp_path):
    path = _write(tmp_path, [{"train_data_dir": "a"}])
    with pytest.raises(UserError, match="are both on the command line.*Drop --train_data_dir"):
        parse_config([*MODEL, "--family", "sana", "--train_data_dir", "x", "--dataset_config", str(path)])
    run = tmp_path / "run.yaml"
    run.write_text(yaml.safe_dump({"family": "sana", "train_data_dir": "x", "datasets": [{"train_data_dir": "a"}]}))
    with pytest.raises(UserError, match=r"`train_data_dir: x` and a `datasets:` list are both in .*Remove "
                                        r"`train_data_dir` from .*\(or add it to the dataset config as a set"):
        parse_config([*MODEL, "--config", str(run)])


def test_a_recipes_data_folder_yields_to_a_dataset_config_on_the_command_line(tmp_path):
    # a recipe --config names its data folder and sizes; --dataset_config on the command line takes the folder's
    # place (said in the run's notes), and a set's own frame buckets take the place of the recipe's sizes for it
    sets = _write(tmp_path, [{"train_data_dir": "a"}, {"train_data_dir": "b", "frame_buckets": "1x64x64,9x64x64"}])
    recipe = tmp_path / "recipe.yaml"
    recipe.write_text(yaml.safe_dump({"family": "wan", "pretrained_model_name_or_path": "org/model",
                                      "train_data_dir": "demo/clips", "max_num_frames": 9, "height": 64, "width": 64}))
    cfg = parse_config(["--config", str(recipe), "--dataset_config", str(sets)])
    assert cfg.data.train_data_dir is None and cfg.data.dataset_config == str(sets)
    assert cfg.video.height == 64  # the run's size, for the sets without their own and the validation samples
    (note,) = cfg.notes
    assert note == (f"--dataset_config on the command line takes the place of `train_data_dir: demo/clips` in "
                    f"`{recipe}`: the run trains on the dataset config's sets")
    # and a data folder on the command line takes the place of a recipe's `datasets:` list
    listed = tmp_path / "listed.yaml"
    listed.write_text(yaml.safe_dump({"family": "sana", "pretrained_model_name_or_path": "org/model",
                                      "datasets": [{"train_data_dir": "a"}]}))
    cfg = parse_config(["--config", str(listed), "--train_data_dir", "mine"])
    assert cfg.data.dataset_config is None and cfg.data.train_data_dir == "mine"
    assert cfg.notes == (f"--train_data_dir on the command line takes the place of the `datasets:` list in "
                         f"`{listed}`",)


def test_both_a_datasets_list_and_a_dataset_config_are_refused(tmp_path):
    run = tmp_path / "run.yaml"
    run.write_text(yaml.safe_dump({"dataset_config": "other.toml", "datasets": [{"train_data_dir": "a"}]}))
    with pytest.raises(UserError, match="both a `datasets:` list and `dataset_config"):
        parse_config([*MODEL, "--family", "sana", "--config", str(run)])


def test_a_set_option_the_family_never_reads_is_refused_as_a_flag_is(tmp_path):
    path = _write(tmp_path, [{"train_data_dir": "a", "max_num_frames": 17}])
    with pytest.raises(UserError) as err:
        parse_config([*MODEL, "--family", "sana", "--dataset_config", str(path)])
    assert "`max_num_frames` in data set 1 of" in str(err.value) and "never reads it" in str(err.value)


def test_a_video_llm_is_refused(tmp_path):
    path = _write(tmp_path, [{"train_data_dir": "a"}])
    with pytest.raises(UserError, match="video LLM"):
        parse_config([*MODEL, "--family", "qwen2_5_vl", "--dataset_config", str(path)])


def test_general_beside_datasets_in_the_run_config(tmp_path):
    run = tmp_path / "run.yaml"
    run.write_text(yaml.safe_dump({"family": "sana", "pretrained_model_name_or_path": "org/model",
                                   "general": {"caption_extension": ".caption"},
                                   "datasets": [{"train_data_dir": "a"}]}))
    cfg = parse_config(["--config", str(run)])
    (a,) = cfg.data_sets.sets
    assert a.options["caption_extension"] == ".caption"


def test_a_sets_frame_buckets_beside_its_own_size_is_refused_naming_the_set(tmp_path):
    path = _write(tmp_path, [{"train_data_dir": "a", "name": "clips", "frame_buckets": "9x64x64"},
                             {"train_data_dir": "b"}], general={"height": 64})
    with pytest.raises(UserError) as err:
        parse_config([*MODEL, "--family", "wan", "--dataset_config", str(path)])
    assert "data set 1 (`clips`)" in str(err.value) and "its `height`" in str(err.value)
    fine = _write(tmp_path, [{"train_data_dir": "a", "name": "clips", "frame_buckets": "9x64x64"},
                             {"train_data_dir": "b", "height": 32}], name="fine.yaml")
    # the run's --height yields to the set's own buckets (set_config); the run's --frame_buckets beside a set's size
    # would leave one of them unread
    parse_config([*MODEL, "--family", "wan", "--dataset_config", str(fine), "--height", "64"])
    with pytest.raises(UserError, match="run's --frame_buckets 9x64x64 .* `height` of data set 2"):
        parse_config([*MODEL, "--family", "wan", "--dataset_config", str(fine), "--frame_buckets", "9x64x64"])


@pytest.mark.parametrize(
    ("flags", "words"),
    [
        (["--with_prior_preservation"], "needs --class_data_dir"),
        (["--class_prompt", "a dog"], "--class_prompt belong(s) to prior preservation, which is off"),
        (["--prior_loss_weight", "0.5", "--num_class_images", "3"], "--num_class_images, --prior_loss_weight"),
    ],
)
def test_prior_preservation_flags_are_judged_together(tmp_path, flags, words):
    with pytest.raises(UserError) as err:
        parse_config([*MODEL, "--family", "sana", "--train_data_dir", "a", *flags])
    assert words in str(err.value) and "\n" not in str(err.value), str(err.value)


def test_prior_preservation_and_a_class_set_are_one_source_too_many(tmp_path):
    path = _write(tmp_path, [{"train_data_dir": "a"}, {"train_data_dir": "reg", "is_reg": True}])
    with pytest.raises(UserError, match="both name the class images"):
        parse_config([*MODEL, "--family", "sana", "--dataset_config", str(path), "--with_prior_preservation",
                      "--class_data_dir", "c"])
    cfg = parse_config([*MODEL, "--family", "sana", "--dataset_config", str(path), "--prior_loss_weight", "0.5"])
    assert cfg.data.prior_loss_weight == 0.5


def test_repeats_beside_a_dataset_config_is_refused(tmp_path):
    path = _write(tmp_path, [{"train_data_dir": "a"}])
    with pytest.raises(UserError, match="--repeats 2 and the dataset config .* both say how often"):
        parse_config([*MODEL, "--family", "sana", "--dataset_config", str(path), "--repeats", "2"])


def test_a_sets_own_frame_extraction_against_the_runs_explicit_frame_sampling_is_refused(tmp_path):
    # the set's `first` took the place of the run's --frame_sampling uniform without a word
    path = tmp_path / "m.toml"
    path.write_text('[[datasets]]\nvideo_directory = "v"\nresolution = [64, 48]\ntarget_frames = [9]\n'
                    'frame_extraction = "chunk"\n')
    base = [*MODEL, "--family", "wan", "--dataset_config", str(path)]
    with pytest.raises(UserError) as err:
        parse_config([*base, "--frame_sampling", "uniform"])
    text = str(err.value)
    assert text.startswith("The run's --frame_sampling uniform and `frame_extraction = 'chunk'` of data set 1 (`v`)")
    assert "Drop --frame_sampling from the command line (or the --config file), or remove `frame_extraction`" in text
    run = tmp_path / "run.yaml"  # a --config key is as explicit as a flag
    run.write_text(yaml.safe_dump({"pretrained_model_name_or_path": "org/model", "family": "wan",
                                   "dataset_config": str(path), "frame_sampling": "uniform"}))
    with pytest.raises(UserError, match="The run's --frame_sampling uniform and `frame_extraction = 'chunk'`"):
        parse_config(["--config", str(run)])
    parse_config([*base, "--frame_sampling", "first"])  # the same value: nothing to refuse
    parse_config(base)


# ---- read once, at setup -----------------------------------------------------------------------------------------
def test_a_parse_reads_the_file_once_and_the_folders_sets_plan_and_samples_read_what_it_holds(tmp_path, monkeypatch):
    """The file was read and parsed at four call sites (twice by the parser's checks, by the folder check, by the
    data sets: six times in a short run); now the parser reads it once and everything else reads ``cfg.data_sets``."""
    import os

    from helpers import count_reads

    from dit_lora.data.data_sets import SetsMedia, run_sets, sample_sizes, set_configs
    from dit_lora.registry import get_spec
    from dit_lora.setup.resolve import resolve_config
    from dit_lora.training.run_folders import check_run_folders

    path = _write(tmp_path, [{"train_data_dir": str(tmp_path / "a"), "resolution": 32}, {"train_data_dir": "b"}])
    reads = count_reads(monkeypatch)
    cfg = parse_config([*MODEL, "--family", "sana", "--dataset_config", str(path), "--validation_prompt", "a",
                        "--output_dir", str(tmp_path / "out")])
    assert reads[os.path.realpath(path)] == 1
    spec = get_spec("sana")
    check_run_folders(cfg)
    cfg = resolve_config(cfg, build_demo=False, validate=False).config  # held: not read again for a parsed config
    assert [s.name for s in run_sets(cfg)[0]] == ["a", "b"] and len(set_configs(cfg)) == 2
    assert sample_sizes(cfg, spec)[0] == {"resolution": 32}
    assert [s.name for s in SetsMedia(cfg, spec).sets] == ["a", "b"]
    assert reads[os.path.realpath(path)] == 1
    path.unlink()  # gone mid-run: nothing reads it again
    assert [s.name for s in SetsMedia(cfg, spec).sets] == ["a", "b"]


def test_check_data_reads_the_file_once(tmp_path, monkeypatch, capsys):
    import os

    from helpers import count_reads
    from PIL import Image

    from dit_lora.commands.cli import main

    data = tmp_path / "mine"
    data.mkdir()
    for i in range(2):
        Image.new("RGB", (64, 64), (40 * i, 90, 30)).save(data / f"img{i}.png")
        (data / f"img{i}.txt").write_text("a green square")
    path = _write(tmp_path, [{"train_data_dir": str(data), "repeats": 2}])
    reads = count_reads(monkeypatch)
    with pytest.raises(SystemExit) as done:
        main(["check-data", "--dataset_config", str(path), "--resolution", "64"])
    assert done.value.code == 0, capsys.readouterr().err
    assert "data set 1/1 `mine`" in capsys.readouterr().out
    assert reads[os.path.realpath(path)] == 1


def test_a_config_built_in_code_is_read_when_resolved_and_never_by_the_code_that_uses_its_sets(tmp_path):
    from dit_lora.config import TrainConfig
    from dit_lora.config.dataset_config import data_sets_of, with_data_sets
    from dit_lora.data.data_sets import run_sets
    from dit_lora.setup.resolve import resolve_config

    path = _write(tmp_path, [{"train_data_dir": "a"}])
    cfg = TrainConfig(family="sana", dataset_config=str(path))
    with pytest.raises(RuntimeError, match="is read at setup"):
        run_sets(cfg)
    resolved = resolve_config(cfg, build_demo=False, validate=False).config
    assert [s.name for s in data_sets_of(resolved.data, resolved.data_sets).sets] == ["a"]
    assert with_data_sets(resolved) is resolved  # read already: kept, not read again
    other = _write(tmp_path, [{"train_data_dir": "b"}], name="other.yaml")
    moved = dataclasses.replace(resolved, dataset_config=str(other))
    with pytest.raises(RuntimeError, match="is read at setup"):  # another file than the one read
        data_sets_of(moved.data, moved.data_sets)
    read = with_data_sets(moved)
    assert [s.name for s in data_sets_of(read.data, read.data_sets).sets] == ["b"]
    assert data_sets_of(TrainConfig(family="sana", train_data_dir="a").data, None) is None


def test_the_sets_are_read_for_the_family_the_parser_infers_not_the_default(tmp_path):
    """A recipe's family (or the model's, for `plan`) is inferred after a first look at the options under the default
    (image) family: the sets were judged there too, so a wan recipe's set giving `max_num_frames` was refused as an
    option Sana never reads. They are read and judged once, for the inferred family."""
    path = _write(tmp_path, [{"train_data_dir": "a", "max_num_frames": 9}])
    cfg = parse_config([*MODEL, "--dataset_config", str(path)], infer_family=lambda c: ("wan", "the recipe's family"))
    assert cfg.model.family == "wan" and cfg.data_sets.video and cfg.data_sets.sets[0].options["max_num_frames"] == 9
    with pytest.raises(UserError, match="`max_num_frames` in data set 1 of"):  # an image family still refuses it
        parse_config([*MODEL, "--dataset_config", str(path)], infer_family=lambda c: ("sana", "the recipe's family"))
