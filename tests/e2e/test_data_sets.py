"""A dataset config through the loop: Wan trains on an image folder (repeats 2, weight 0.7) and a clip folder (weight
0.3) at once, a run killed mid-update resumes bit for bit with the same per-set batch counts, and those counts follow
the weights; a set's loss weight scales its batches' loss exactly; ``check-data`` screens every set."""

from __future__ import annotations

import json
import math
import subprocess
import sys

import pytest
import torch
import yaml
from safetensors.torch import load_file

from helpers import ROOT, train_in_process

ADAPTER = "pytorch_lora_weights.safetensors"
WAN = dict(family="wan", resolution=None, center_crop=None, max_num_frames=9, height=64, width=64,
           train_batch_size=1, mixed_precision="no", max_train_steps=12, checkpointing_steps=4,
           lr_scheduler="constant", lr_warmup_steps=0)


@pytest.fixture(scope="module")
def mixed_sets(tmp_path_factory):
    """A dataset config of 4 still images (repeats 2, weight 0.7) and 4 clips of 9 frames (weight 0.3)."""
    from dit_lora.data.synthetic.clips import make_moving_square_dataset
    from dit_lora.data.synthetic.shapes import make_shapes_dataset

    root = tmp_path_factory.mktemp("mixed-sets")
    images = make_shapes_dataset(root / "stills", n=4, size=64, seed=2)
    clips = make_moving_square_dataset(root / "clips", n=4, num_frames=9, fps=16, seed=3)
    config = root / "sets.toml"
    config.write_text(f'[[datasets]]\ntrain_data_dir = "{images}"\nrepeats = 2\nweight = 0.7\n\n'
                      f'[[datasets]]\ntrain_data_dir = "{clips}"\nweight = 0.3\n')
    return config


@pytest.fixture(scope="module")
def tiny_wan(tmp_path_factory):
    from dit_lora.families.wan.demo import build_tiny_wan_pipeline

    return build_tiny_wan_pipeline(tmp_path_factory.mktemp("wan") / "t2v", variant="2.1-t2v")


class _Killed(BaseException):
    """A crash point's SIGKILL in-process (``train_in_process`` catches Exception only)."""


@pytest.mark.slow
def test_wan_trains_on_images_and_clips_resumes_bitwise_and_draws_by_weight(tiny_wan, mixed_sets, tmp_path,
                                                                             monkeypatch, capsys):
    from dit_lora.training import drills

    run = lambda where, **extra: train_in_process(  # noqa: E731
        tiny_wan, mixed_sets.parent, tmp_path / where, train_data_dir=None, dataset_config=mixed_sets, **WAN, **extra)
    reference, ref_out = run("ref")
    assert isinstance(reference, dict) and reference["status"] == "completed", reference
    log = capsys.readouterr().out
    assert "data set 1/2 `stills`" in log and "(2 repeats, weight 0.7)" in log and "data set 2/2 `clips`" in log
    stills, clips = reference["data_sets"]
    assert (stills["samples"], clips["samples"]) == (8, 4)
    assert stills["batches"] + clips["batches"] == 12
    # 12 draws of a 0.3 set: within 4 standard deviations of 3.6 (and both sets trained)
    assert abs(clips["batches"] - 3.6) < 4 * math.sqrt(12 * 0.3 * 0.7) and clips["batches"] > 0 < stills["batches"]

    def die(code):
        raise _Killed(code)

    monkeypatch.setenv(drills.CRASH_VAR, "micro_batch:10")
    monkeypatch.setattr(drills.os, "_exit", die)
    with pytest.raises(_Killed):
        run("run")
    monkeypatch.delenv(drills.CRASH_VAR)
    resumed, out = run("run", resume_from_checkpoint="latest")
    assert isinstance(resumed, dict) and resumed["steps_this_run"] == 4, resumed
    a, b = load_file(str(ref_out / ADAPTER)), load_file(str(out / ADAPTER))
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)
    assert resumed["loss_history"] == reference["loss_history"]
    assert resumed["data_sets"] == reference["data_sets"]  # the counts came back with the checkpoint


@pytest.mark.slow
def test_a_sets_loss_weight_scales_its_gradient_not_the_logged_loss(tiny_sana, shapes_data, tmp_path):
    """One set at loss weight 0.5 against the same folder given plainly: the first update's gradient norm (the
    guard's, in checkpoint-1) is halved, its logged loss is not (same noise, same weights); AdamW's update is
    scale-free, so a loss weight matters between sets."""
    config = tmp_path / "half.yaml"
    config.write_text(yaml.safe_dump({"datasets": [{"train_data_dir": str(shapes_data), "loss_weight": 0.5}]}))
    runs = {}
    for name, extra in (("plain", {}), ("half", {"train_data_dir": None, "dataset_config": config})):
        summary, out = train_in_process(tiny_sana, shapes_data, tmp_path / name, max_train_steps=1,
                                        checkpointing_steps=1, **extra)
        assert isinstance(summary, dict), summary
        state = json.loads((out / "checkpoint-1" / "trainer_state_rank0.json").read_text())
        runs[name] = (summary, state["guard"]["last_norm"])
    (plain, plain_norm), (half, half_norm) = runs["plain"], runs["half"]
    assert half["loss_history"] == plain["loss_history"]
    assert half_norm == pytest.approx(0.5 * plain_norm, rel=1e-5)
    assert half["data_sets"][0]["loss_weight"] == 0.5 and plain["data_sets"] is None


@pytest.mark.slow
def test_sets_of_other_cache_settings_cache_apart(tiny_sana, shapes_data, tmp_path):
    """A set with its own crop (another cache namespace) beside one without: both cached, each in its folder."""
    config = tmp_path / "sets.yaml"
    config.write_text(yaml.safe_dump({"datasets": [{"train_data_dir": str(shapes_data)},
                                                   {"train_data_dir": str(shapes_data), "name": "cropped",
                                                    "center_crop": False}]}))
    summary, _ = train_in_process(tiny_sana, shapes_data, tmp_path, max_train_steps=2, train_data_dir=None,
                                  dataset_config=config)
    assert isinstance(summary, dict) and summary["status"] == "completed", summary
    folders = [p for p in (tmp_path / "cache").iterdir() if p.is_dir()]
    assert len(folders) == 2 and all(len(list(f.glob("*.safetensors"))) >= 16 for f in folders)


@pytest.mark.slow
def test_check_data_screens_every_set(tiny_wan, mixed_sets, tmp_path):
    proc = subprocess.run(
        [sys.executable, "-m", "dit_lora.commands.cli", "check-data", "--pretrained_model_name_or_path", str(tiny_wan),
         "--dataset_config", str(mixed_sets), "--max_num_frames", "9", "--height", "64", "--width", "64", "--all"],
        capture_output=True, text=True, cwd=ROOT, timeout=300,
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    out = proc.stdout
    assert "data set 1/2 `stills`" in out and "data set 2/2 `clips`" in out
    assert "stills/00000.png" in out and "clips/" in out


@pytest.mark.slow
def test_a_run_reads_its_dataset_config_once(tiny_sana, shapes_data, tmp_path, monkeypatch):
    """Parse, folder checks, memory plan, data sets, validation and final samples: the file was read six times in a
    short run (more with the plan and samples); it is read once, at setup, and the run works from that reading."""
    import os

    from helpers import count_reads

    config = tmp_path / "sets.yaml"
    config.write_text(yaml.safe_dump({"datasets": [{"train_data_dir": str(shapes_data), "resolution": 64}]}))
    reads = count_reads(monkeypatch)
    summary, _ = train_in_process(tiny_sana, shapes_data, tmp_path, max_train_steps=2, train_data_dir=None,
                                  dataset_config=config, ignore_memory_plan="false", validation_prompt="a shape",
                                  validation_steps=1)
    assert isinstance(summary, dict) and summary["status"] == "completed", summary
    assert reads[os.path.realpath(config)] == 1
