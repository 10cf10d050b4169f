"""A kohya ``3_clipword/`` folder of 2 clips through a Wan run on the tiny demo model: 6 samples per epoch (logged),
the clips encoded once each, and a run killed in its second epoch resumes to the same adapter bit for bit."""

from __future__ import annotations

from pathlib import Path

import pytest
from safetensors.torch import load_file

from helpers import train_in_process

pytestmark = pytest.mark.filterwarnings("ignore::FutureWarning")

#: the Wan demo's geometry (recipes/configs/wan/demo.yaml: 9 frames of 64 x 64), fp32 (bf16 matmuls are slow on a CPU);
#: one clip a step, so an epoch of 6 copies is 6 updates and update 7 is the second epoch's first
RUN = dict(family="wan", resolution=None, center_crop=None, max_num_frames=9, height=64, width=64, train_batch_size=1,
           mixed_precision="no", max_train_steps=8, checkpointing_steps=4, random_flip="true", lora_dropout=0.1,
           lr_scheduler="cosine", lr_warmup_steps=2)
ADAPTER = "pytorch_lora_weights.safetensors"


class _Killed(BaseException):
    """The in-process stand-in for a crash point's SIGKILL (``train_in_process`` catches Exception only)."""


def _die(code):
    raise _Killed(code)


@pytest.fixture(scope="module")
def kohya_clips(tmp_path_factory) -> Path:
    """``3_clipword/`` holding 2 distinct uncaptioned clips (PyAV), captioned by the folder's words."""
    from dit_lora.data.synthetic.clips import write_moving_square_clip

    root = tmp_path_factory.mktemp("kohya-clips")
    for i, (color, direction) in enumerate((("red", "left to right"), ("blue", "top to bottom"))):
        write_moving_square_clip(root / "3_clipword" / f"c{i}.mp4", color=color, direction=direction, num_frames=9,
                                 size=64, fps=16)
    return root


@pytest.mark.slow
def test_kohya_clip_folder_trains_and_resumes_bit_for_bit(tmp_path_factory, kohya_clips, monkeypatch, capsys):
    from dit_lora.families.wan.demo import build_tiny_wan_pipeline
    from dit_lora.training import drills as hooks

    root = tmp_path_factory.mktemp("kohya-run")
    model = build_tiny_wan_pipeline(root / "model", variant="2.1-t2v")
    capsys.readouterr()
    reference, ref_out = train_in_process(model, kohya_clips, root / "ref", **RUN)
    assert isinstance(reference, dict), reference
    log = capsys.readouterr().out
    assert "`3_clipword/`: 2 clip(s) x 3 repeats = 6 samples per epoch (kohya's N_words folder)" in log
    assert "6 samples per epoch from 2 clip(s)" in log
    assert "cached 2/2" in log or "caching 2/2 samples" in log  # two entries encoded, not six

    run_dir = root / "killed"
    monkeypatch.setenv(hooks.CRASH_VAR, "micro_batch:7")  # update 7: the second epoch, after checkpoint-4
    monkeypatch.setattr(hooks.os, "_exit", _die)
    with pytest.raises(_Killed):
        train_in_process(model, kohya_clips, run_dir, **RUN)
    monkeypatch.delenv(hooks.CRASH_VAR)
    assert not (run_dir / "out" / ADAPTER).exists()
    resumed, out = train_in_process(model, kohya_clips, run_dir, **RUN, resume_from_checkpoint="latest")
    assert isinstance(resumed, dict), resumed
    assert resumed["steps_this_run"] == 4  # from checkpoint-4
    assert resumed["loss_history"] == reference["loss_history"]
    a, b = load_file(str(ref_out / ADAPTER)), load_file(str(out / ADAPTER))
    assert a.keys() == b.keys() and a
    for key in a:
        assert a[key].dtype == b[key].dtype and bool((a[key] == b[key]).all()), key
