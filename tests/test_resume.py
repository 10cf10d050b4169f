"""Kill a run (during a checkpoint save, and with SIGKILL mid-training), resume, and get the same adapter bit for bit."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import torch
from safetensors.torch import load_file

from conftest import RECIPE, ROOT, base_args, read_summary, run_recipe

COMMON = dict(max_train_steps=8, checkpointing_steps=4, gradient_accumulation_steps=2, random_flip="true",
              lora_dropout=0.1, lr_scheduler="cosine", lr_warmup_steps=2, max_grad_norm=0.5)


def _adapter(out):
    return load_file(str(out / "pytorch_lora_weights.safetensors"))


def _assert_bitwise_equal(a, b):
    assert a.keys() == b.keys()
    for k in a:
        assert a[k].dtype == b[k].dtype and bool((a[k] == b[k]).all()), k


def test_killed_during_save_and_resumed_is_bitwise_identical(tmp_path, tiny_sana, shapes_data):
    cache = tmp_path / "cache"
    ref_out, out = tmp_path / "reference", tmp_path / "interrupted"
    ref = run_recipe(base_args(tiny_sana, shapes_data, ref_out, cache, **COMMON))
    assert ref.returncode == 0, ref.stdout + ref.stderr

    # Die after checkpoint-8's files are written but before its completion marker.
    killed = run_recipe(base_args(tiny_sana, shapes_data, out, cache, checkpoints_total_limit=1, **COMMON),
                        env={"DIT_LORA_FAULT": "checkpoint_before_marker:8"})
    assert killed.returncode == 137, killed.stdout + killed.stderr
    assert (out / "checkpoint-4" / "dit_lora_checkpoint_complete.json").is_file()  # not pruned: 8 never completed
    assert not (out / "checkpoint-8").exists() and (out / ".tmp-checkpoint-8").exists()
    assert not (out / "pytorch_lora_weights.safetensors").exists()

    resumed = run_recipe(base_args(tiny_sana, shapes_data, out, cache, checkpoints_total_limit=1,
                                   resume_from_checkpoint="latest", **COMMON))
    assert resumed.returncode == 0, resumed.stdout + resumed.stderr
    assert "resumed from" in resumed.stdout and "checkpoint-4" in resumed.stdout
    _assert_bitwise_equal(_adapter(ref_out), _adapter(out))
    assert sorted(p.name for p in out.glob("checkpoint-*")) == ["checkpoint-8"]  # pruned only after 8 completed
    # Checkpoints hold the weights as trained (what the optimizer state belongs to); only the exported adapter has
    # the scale lora_alpha / rank = 8 / 4 folded into lora_B, once, and stores alpha = rank.
    checkpointed = load_file(str(out / "checkpoint-8" / "trainable_weights.safetensors"))
    exported = _adapter(out)
    assert len(checkpointed) == len(exported) > 0
    for name, value in checkpointed.items():
        assert torch.equal(exported["transformer." + name.replace(".default.", ".")],
                           value * 2 if ".lora_B." in name else value), name
    assert not (out / ".tmp-checkpoint-8").exists()
    s_ref, s = read_summary(ref_out), read_summary(out)
    assert s["steps"] == s_ref["steps"] == 8 and s["samples_seen"] == s_ref["samples_seen"]
    assert s["loss_history"][-1] == s_ref["loss_history"][-1]


def test_sigkill_mid_training_then_resume_is_bitwise_identical(tmp_path, tiny_sana, shapes_data):
    cache = tmp_path / "cache"
    ref_out, out = tmp_path / "reference", tmp_path / "killed"
    opts = {**COMMON, "max_train_steps": 12}
    ref = run_recipe(base_args(tiny_sana, shapes_data, ref_out, cache, **opts))
    assert ref.returncode == 0, ref.stderr

    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    proc = subprocess.Popen([sys.executable, str(RECIPE), *base_args(tiny_sana, shapes_data, out, cache, **opts)],
                            cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    marker = out / "checkpoint-4" / "dit_lora_checkpoint_complete.json"
    deadline = time.time() + 240
    while not marker.exists() and proc.poll() is None and time.time() < deadline:
        time.sleep(0.05)
    assert proc.poll() is None, "run finished before it could be killed"
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    assert not (out / "pytorch_lora_weights.safetensors").exists()

    resumed = run_recipe(base_args(tiny_sana, shapes_data, out, cache, resume_from_checkpoint="latest", **opts))
    assert resumed.returncode == 0, resumed.stdout + resumed.stderr
    _assert_bitwise_equal(_adapter(ref_out), _adapter(out))


def test_resume_from_incomplete_checkpoint_is_refused(tmp_path, tiny_sana, shapes_data):
    out = tmp_path / "out"
    (out / "checkpoint-3").mkdir(parents=True)
    proc = run_recipe(base_args(tiny_sana, shapes_data, out, tmp_path / "cache",
                                resume_from_checkpoint=str(out / "checkpoint-3")))
    text = " ".join((proc.stdout + proc.stderr).split())
    assert proc.returncode == 2 and "is incomplete" in text and "Traceback" not in text
