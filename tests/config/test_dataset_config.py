"""config/dataset_config.py: a dataset config (``--dataset_config``, or ``datasets:`` in the ``--config`` YAML) is read
into sets of data options with their own repeats, weight and loss weight, and every mistake in it ends the parse in
one paragraph naming the file, the set and the key."""

from __future__ import annotations

import pytest
import yaml

from dit_lora.config import parse_config
from dit_lora.config.dataset_config import SET_OPTIONS, read_data_sets, read_dataset_config
from dit_lora.core.errors import UserError

MODEL = ["--pretrained_model_name_or_path", "org/model"]


def _write(tmp_path, sets, name="sets.yaml", **top):
    path = tmp_path / name
    path.write_text(yaml.safe_dump({**top, "datasets": sets}))
    return path


def test_sets_take_their_options_general_defaults_and_their_own_keys(tmp_path):
    path = _write(
        tmp_path,
        [
            {"train_data_dir": "photos/", "repeats": 2, "weight": 0.7, "resolution": 512},
            {"dataset_name": "me/clips", "name": "hub", "weight": 0.3, "loss_weight": 0.5},
        ],
        general={"caption_extension": ".caption", "resolution": 768},
    )
    photos, hub = read_data_sets(path)
    assert photos.name == "photos" and hub.name == "hub"  # a folder's last part, or the set's own name
    assert photos.options == {"train_data_dir": "photos/", "caption_extension": ".caption", "resolution": 512}
    assert hub.options == {"dataset_name": "me/clips", "caption_extension": ".caption", "resolution": 768}
    assert (photos.repeats, photos.weight, photos.loss_weight) == (2, 0.7, 1.0)
    assert (hub.repeats, hub.weight, hub.loss_weight) == (1, 0.3, 0.5)


def test_toml_reads_as_yaml_does(tmp_path):
    path = tmp_path / "sets.toml"
    path.write_text(
        '[general]\nresolution = 512\n\n[[datasets]]\ntrain_data_dir = "a"\nrepeats = 3\n\n'
        '[[datasets]]\ntrain_data_dir = "b"\nloss_weight = 2.0\n'
    )
    a, b = read_data_sets(path)
    assert a.options == {"train_data_dir": "a", "resolution": 512} and a.repeats == 3
    assert b.loss_weight == 2.0 and b.weight is None


def test_two_folders_of_one_name_are_told_apart(tmp_path):
    a, b = read_data_sets(_write(tmp_path, [{"train_data_dir": "x/data"}, {"train_data_dir": "y/data"}]))
    assert a.name == "data" and b.name == "data-2"


@pytest.mark.parametrize(
    ("sets", "words"),
    [
        ([{"train_data_dir": "a", "resolutoin": 512}], ["`resolutoin`", "did you mean `resolution`", "data set 1"]),
        ([{"train_data_dir": "a", "random_flip": True}], ["`random_flip`", "whole run", "command line"]),
        ([{"resolution": 512}], ["neither", "`train_data_dir`", "exactly one"]),
        ([{"train_data_dir": "a", "dataset_name": "b"}], ["`train_data_dir` and `dataset_name`", "exactly one"]),
        ([{"train_data_dir": "a", "repeats": 0}], ["`repeats: 0`", "whole number 1 or more"]),
        ([{"train_data_dir": "a", "repeats": 1.5}], ["`repeats: 1.5`", "whole number"]),
        ([{"train_data_dir": "a", "weight": -1}], ["`weight: -1`", "more than 0"]),
        ([{"train_data_dir": "a", "loss_weight": float("nan")}], ["`loss_weight: nan`", "more than 0"]),
        ([{"train_data_dir": "a", "weight": 1}, {"train_data_dir": "b"}], ["`a` give a `weight`", "or to none"]),
        ([{"train_data_dir": "a", "name": "x"}, {"train_data_dir": "b", "name": "x"}], ["two sets `x`"]),
        ([{"train_data_dir": "a", "resolution": "big"}], ["resolution", "data set 1 (of 1) of"]),
        ([{"train_data_dir": "a", "is_reg": True}], ["only class images (`is_reg`)"]),
        ([], ["non-empty `datasets` list"]),
        (["a"], ["non-empty `datasets` list"]),
    ],
)
def test_a_mistake_is_one_paragraph_naming_the_file_and_set(tmp_path, sets, words):
    path = _write(tmp_path, sets)
    with pytest.raises(UserError) as err:
        read_data_sets(path)
    text = str(err.value)
    assert str(path) in text and "\n" not in text, text
    for word in words:
        assert word in text, (word, text)


def test_a_missing_or_broken_file_is_named(tmp_path):
    with pytest.raises(UserError, match="does not exist"):
        read_data_sets(tmp_path / "nope.yaml")
    (tmp_path / "bad.toml").write_text("[[datasets]\n")
    with pytest.raises(UserError, match="not valid TOML"):
        read_data_sets(tmp_path / "bad.toml")


def test_a_yaml_file_named_toml_is_said_to_be_yaml_with_the_rename_that_reads_it(tmp_path):
    """Issue 76: a YAML dataset config named .toml got only "not valid TOML"; as --config it was said to be TOML."""
    yaml_text = yaml.safe_dump({"datasets": [{"train_data_dir": "photos", "repeats": 2}]})
    (tmp_path / "sets.toml").write_text(yaml_text)
    with pytest.raises(UserError) as err:
        read_data_sets(tmp_path / "sets.toml")
    assert "is named .toml but holds YAML" in str(err.value) and f"rename it to `{tmp_path / 'sets.yaml'}`" in str(err.value)
    (tmp_path / "sets.yaml").write_text(yaml_text)
    assert [s.repeats for s in read_data_sets(tmp_path / "sets.yaml")] == [2]  # renamed as said, it reads
    (tmp_path / "run.toml").write_text(yaml.safe_dump({"family": "sana", "resolution": 64}))
    with pytest.raises(UserError) as err:
        parse_config(["--config", str(tmp_path / "run.toml")])
    assert "is named .toml but holds YAML" in str(err.value) and "(--config reads YAML only)" in str(err.value)
    assert "is TOML;" not in str(err.value)


def test_every_set_option_is_a_data_option():
    from dit_lora.config.sections import SECTION_OF

    assert all(SECTION_OF[name] in ("data", "video") for name in SET_OPTIONS)


# ---- through the parser ------------------------------------------------------------------------------------------
def test_datasets_in_the_run_config_are_its_dataset_config(tmp_path):
    run = tmp_path / "run.yaml"
    run.write_text(yaml.safe_dump({"family": "sana", "pretrained_model_name_or_path": "org/model", "resolution": 512,
                                   "datasets": [{"train_data_dir": "a"}, {"train_data_dir": "b", "resolution": 256}]}))
    cfg = parse_config(["--config", str(run)])
    assert cfg.data.dataset_config == str(run) and cfg.data.train_data_dir is None
    a, b = read_data_sets(cfg.data.dataset_config)
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


def test_the_flavour_of_dit_loras_own_file_is_none(tmp_path):
    read = read_dataset_config(_write(tmp_path, [{"train_data_dir": "a"}]))
    assert read.flavour is None and read.note is None


def test_defaults_that_are_no_choice_pass_and_two_folders_in_one_set_are_refused(tmp_path):
    (one,) = read_data_sets(_write(tmp_path, [{"train_data_dir": "a", "is_reg": False}]))
    assert one.options == {"train_data_dir": "a"}
    (alias,) = read_data_sets(_write(tmp_path, [{"instance_data_dir": "a"}]))
    assert alias.options == {"train_data_dir": "a"}
    with pytest.raises(UserError, match="both `train_data_dir` and `instance_data_dir`"):
        read_data_sets(_write(tmp_path, [{"train_data_dir": "a", "instance_data_dir": "b"}]))


def test_general_beside_datasets_in_the_run_config(tmp_path):
    run = tmp_path / "run.yaml"
    run.write_text(yaml.safe_dump({"family": "sana", "pretrained_model_name_or_path": "org/model",
                                   "general": {"caption_extension": ".caption"},
                                   "datasets": [{"train_data_dir": "a"}]}))
    cfg = parse_config(["--config", str(run)])
    (a,) = read_data_sets(cfg.data.dataset_config)
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


def test_one_set_of_class_images_paired_never_drawn(tmp_path):
    reg, mine = read_data_sets(_write(tmp_path, [{"train_data_dir": "reg", "is_reg": True},
                                                 {"train_data_dir": "mine"}]))
    assert reg.is_reg and not mine.is_reg  # the file's order; the run puts the class set last
    for sets, words in (
        ([{"train_data_dir": "a", "is_reg": True}, {"train_data_dir": "b", "is_reg": True}, {"train_data_dir": "c"}],
         "marks 2 sets `is_reg`"),
        ([{"train_data_dir": "a", "is_reg": True}], "only class images"),
        ([{"train_data_dir": "a", "is_reg": True, "weight": 1}, {"train_data_dir": "b", "weight": 1}],
         "gives a `weight` or `loss_weight`"),
        ([{"train_data_dir": "a", "is_reg": "yes"}, {"train_data_dir": "b"}], "Give true or false"),
    ):
        with pytest.raises(UserError, match=words):
            read_data_sets(_write(tmp_path, sets))


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
