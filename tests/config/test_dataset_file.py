"""config/dataset_file.py: a dataset config (``--dataset_config``, or ``datasets:`` in the ``--config`` YAML) is read
into sets of data options with their own repeats, weight and loss weight, and every mistake in it ends the read in
one paragraph naming the file, the set and the key; a run reads the file from disk once."""

from __future__ import annotations

import pytest
import yaml

from dit_lora.config import parse_config
from dit_lora.config.dataset_file import SET_OPTIONS, read_data_sets, read_dataset_config
from dit_lora.core.errors import UserError


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


def test_read_from_disk_in_one_place(tmp_path, monkeypatch):
    """The file was read by four call sites (the parser's two checks, the folder check, the data sets); now
    :func:`read_dataset_config` is the one reader, and only setup's ``with_data_sets`` calls it."""
    import os
    import re

    from helpers import ROOT, count_reads

    callers = sorted(
        str(py.relative_to(ROOT))
        for py in (ROOT / "dit_lora").rglob("*.py")
        if py.name != "dataset_file.py" and re.search(r"\bread_(dataset_config|data_sets|file)\b\(", py.read_text())
    )
    assert callers == ["dit_lora/config/dataset_config.py"]
    path = _write(tmp_path, [{"train_data_dir": "a"}])
    reads = count_reads(monkeypatch)
    assert read_dataset_config(path, video=True).read_from(path, True)
    assert reads[os.path.realpath(path)] == 1
