"""``--optimizer prodigy`` (issue 49) keeps the guard's promise: a drilled NaN step changes no weight and no part of
Prodigy's estimate, every step runs under the host-sync audit, and a run resumed from its checkpoint ends bitwise
equal to the uninterrupted one."""

from __future__ import annotations

import shutil

import pytest
import torch
from safetensors.torch import load_file

from helpers import train_in_process

#: diffusers' examples' Prodigy flags (learning rate 1.0: Prodigy's multiplier), a NaN loss at update 2, checkpoints
PRODIGY = dict(optimizer="Prodigy", learning_rate=1.0, max_train_steps=4, inject_faults="nan_loss@2",
               checkpointing_steps=2, checkpoints_total_limit=3, lr_warmup_steps=0, lr_scheduler="constant")


def _record(states):
    def on_step(step, model, optimizer):
        inner = getattr(optimizer, "optimizer", optimizer)
        states[step] = {
            "params": {n: p.detach().clone() for n, p in model.named_parameters() if p.requires_grad},
            "estimate": {k: inner.param_groups[0][k].clone() for k in ("d", "d_max", "d_numerator", "k")},
        }
    return on_step


@pytest.mark.slow
def test_prodigy_skips_a_nan_step_whole_syncs_nothing_and_resumes_bitwise(tiny_sana, shapes_data, tmp_path,
                                                                          monkeypatch):
    monkeypatch.setenv("DIT_LORA_SYNC_DEBUG", "1")  # a host read inside a step raises
    states: dict[int, dict] = {}
    summary, out = train_in_process(tiny_sana, shapes_data, tmp_path / "ref", on_step=_record(states), **PRODIGY)
    assert isinstance(summary, dict) and summary["status"] == "completed", summary
    assert summary["skipped_steps"] == 1 and summary["config"]["optimizer"] == "prodigy"
    for part in ("params", "estimate"):  # update 2 was skipped: nothing moved
        assert all(torch.equal(states[2][part][k], states[1][part][k]) for k in states[1][part]), part
    assert not all(torch.equal(states[3]["params"][k], states[2]["params"][k]) for k in states[2]["params"])
    assert states[4]["estimate"]["k"].item() == 3 and states[4]["estimate"]["d_numerator"].item() != 0  # estimating

    resumed_out = tmp_path / "resumed" / "out"
    resumed_out.mkdir(parents=True)
    shutil.copytree(out / "checkpoint-2", resumed_out / "checkpoint-2")
    resumed, resumed_out = train_in_process(tiny_sana, shapes_data, tmp_path / "resumed",
                                            resume_from_checkpoint="latest", **PRODIGY)
    assert isinstance(resumed, dict) and resumed["steps_this_run"] == 2, resumed
    ref, got = (load_file(str(o / "pytorch_lora_weights.safetensors")) for o in (out, resumed_out))
    assert ref.keys() == got.keys() and all(torch.equal(ref[k], got[k]) for k in ref)
    assert resumed["loss_history"] == summary["loss_history"]


def test_prodigy_refuses_what_it_cannot_keep_its_promise_with():
    from dit_lora.config import parse_config
    from dit_lora.core.errors import UserError

    base = ["--family", "sana", "--pretrained_model_name_or_path", "me/model", "--train_data_dir", "/data",
            "--optimizer", "prodigy"]
    with pytest.raises(UserError, match="two optimizers"):
        parse_config([*base, "--use_8bit_adam"])
    with pytest.raises(UserError, match="gradient scaler"):
        parse_config([*base, "--mixed_precision", "fp16", "--allow_fp16"])
    assert parse_config(base).training.optimizer == "prodigy"
