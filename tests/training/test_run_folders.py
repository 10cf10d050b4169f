"""Tests for dit_lora.training.run_folders: the folders a run writes never are, or lie inside, a data folder."""

from __future__ import annotations

import os

import pytest

from dit_lora.config import TrainConfig
from dit_lora.config.dataset_config import with_data_sets
from dit_lora.core.errors import UserError
from dit_lora.training.run_folders import check_output_dir, check_run_folders


def _cfg(family: str = "sana", **values) -> TrainConfig:
    """A config built in code, its dataset config read as setup reads it (``resolve_for_training``)."""
    return with_data_sets(TrainConfig.for_family(family, **values))


def _refused(cfg: TrainConfig) -> str:
    with pytest.raises(UserError) as err:
        check_run_folders(cfg)
    text = str(err.value)
    assert "\n" not in text and ("nothing was written" in text or "Move the data out" in text), text
    return text


@pytest.fixture
def data(tmp_path):
    folder = tmp_path / "data"
    folder.mkdir()
    (folder / "a.png").write_bytes(b"not decoded here")
    (folder / "a.txt").write_text("a caption")
    return folder


def test_output_dir_equal_to_the_data_folder_is_refused_before_anything_is_written(data):
    """The issue's run: --output_dir equal to --train_data_dir wrote its curve, samples and checkpoints into the data."""
    text = _refused(_cfg(train_data_dir=str(data), output_dir=str(data)))
    assert text.startswith(f"`--output_dir {data}` is the data folder `--train_data_dir {data}`")
    assert f"`{data.parent / 'output'}`" in text  # a sibling folder to use instead
    assert sorted(os.listdir(data)) == ["a.png", "a.txt"]  # not even the write probe


def test_output_dir_inside_a_data_folder_is_refused_through_any_spelling(data, tmp_path):
    inside = data / "runs" / "out"
    text = _refused(_cfg(train_data_dir=str(data), output_dir=str(inside)))
    assert text.startswith(f"`--output_dir {inside}` lies inside the data folder `--train_data_dir {data}`")
    assert not (data / "runs").exists()
    os.symlink(data, tmp_path / "link")  # a link to the data folder is the data folder
    _refused(_cfg(train_data_dir=str(data), output_dir=str(tmp_path / "link" / "out")))
    _refused(_cfg(train_data_dir=str(tmp_path / "link"), output_dir=str(data / "out")))
    _refused(_cfg(train_data_dir=str(data), output_dir=str(data / "x" / ".." / "out")))


def test_logging_cache_and_the_other_data_folders_are_judged_too(data, tmp_path):
    out = str(tmp_path / "out")
    text = _refused(_cfg(train_data_dir=str(data), output_dir=out, logging_dir=str(data / "logs"),
                         report_to="tensorboard"))
    assert text.startswith("`--logging_dir ")
    check_run_folders(_cfg(train_data_dir=str(data), output_dir=out, logging_dir=str(data / "logs"), report_to="none"))
    text = _refused(_cfg(train_data_dir=str(data), output_dir=out, cache_dir=str(data / ".cache"), cache_latents=True))
    assert text.startswith(f"`--cache_dir {data / '.cache'}` lies inside")
    held = tmp_path / "held"
    held.mkdir()
    text = _refused(_cfg(train_data_dir=str(data), validation_data_dir=str(held), output_dir=str(held / "o")))
    assert "`--validation_data_dir " in text
    videos = tmp_path / "videos"
    videos.mkdir()
    text = _refused(_cfg("qwen2_5_vl", train_data_dir=str(data / "a.txt"), video_folder=str(videos),
                         output_dir=str(videos)))
    assert f"`--output_dir {videos}` is the data folder `--video_folder {videos}`" in text


def test_a_data_folder_inside_the_output_folder_is_read_unless_the_run_writes_there(tmp_path):
    """The run writes only its named files and folders into --output_dir: a data folder beside them is never written;
    one inside samples/, the logging folder or a checkpoint is."""
    out = tmp_path / "out"
    check_run_folders(_cfg(train_data_dir=str(out / "data"), output_dir=str(out)))
    for written in ("samples", "checkpoint-20", "logs"):
        text = _refused(_cfg(train_data_dir=str(out / written / "data"), output_dir=str(out), report_to="tensorboard"))
        assert text.startswith(f"`--train_data_dir {out / written / 'data'}` lies inside `{out / written}`")


def test_a_dataset_configs_set_folders_are_data_folders(data, tmp_path):
    """Each set of --dataset_config is a data folder: an --output_dir inside one is refused, naming the set."""
    config = tmp_path / "sets.yaml"
    config.write_text(f"datasets:\n  - train_data_dir: {tmp_path / 'other'}\n  - train_data_dir: {data}\n    name: mine\n")
    text = _refused(_cfg(dataset_config=str(config), output_dir=str(data / "out")))
    assert f"lies inside the data folder `--dataset_config set mine: {data}`" in text
    check_run_folders(_cfg(dataset_config=str(config), output_dir=str(tmp_path / "out")))


def _output_dir(cfg):
    """check_output_dir on the two sections it reads."""
    return check_output_dir(cfg.training, cfg.checkpoints)


def _run_cfg(out, **overrides):
    return TrainConfig(family="sana", pretrained_model_name_or_path="m", output_dir=str(out), **overrides)


def _folders(out, *names):
    for name in names:
        (out / name).mkdir(parents=True)
        (out / name / "optimizer.bin").write_bytes(b"x")


def test_a_fresh_run_among_old_checkpoints_is_refused_in_one_paragraph(tmp_path):
    """A run that does not resume never mixes with an older run's checkpoints: pruning by step would remove its
    own newest ones, and `latest` would resume the older run."""
    _folders(tmp_path, "checkpoint-35", "checkpoint-40", ".tmp-checkpoint-41")
    with pytest.raises(UserError) as info:
        _output_dir(_run_cfg(tmp_path))
    text = str(info.value)
    assert "(.tmp-checkpoint-41, checkpoint-35, checkpoint-40)" in text and "\n" not in text
    assert "--resume_from_checkpoint latest" in text and "--overwrite_output_dir" in text
    assert _output_dir(_run_cfg(tmp_path, resume_from_checkpoint="latest")) is None  # resuming: kept
    assert sorted(p.name for p in tmp_path.iterdir()) == [".tmp-checkpoint-41", "checkpoint-35", "checkpoint-40"]


def test_overwrite_output_dir_removes_old_checkpoints_with_one_line(tmp_path):
    _folders(tmp_path, "checkpoint-35", ".old-checkpoint-40", "logs")
    note = _output_dir(_run_cfg(tmp_path, overwrite_output_dir=True))
    assert note == (f"--overwrite_output_dir: removed 2 checkpoint folder(s) of an earlier run from {tmp_path} "
                    "(.old-checkpoint-40, checkpoint-35)")
    assert [p.name for p in tmp_path.iterdir()] == ["logs"]  # only checkpoint folders go
    assert _output_dir(_run_cfg(tmp_path / "new")) is None
