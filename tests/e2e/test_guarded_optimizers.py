"""The optimizers the guard skips on the device (issue 49), ``--optimizer prodigy``, ``adafactor``, ``came``,
``adamw8bit`` and ``adamw4bit`` (torchao's), keep its promise: a drilled NaN step changes no weight and no part of the
optimizer's state (moments, quantized moments' codes and scales, CAME's instabilities, counts, Prodigy's estimate),
every step runs under the host-sync audit, and a run resumed from its checkpoint ends bitwise equal to the
uninterrupted one."""

from __future__ import annotations

import shutil

import pytest
import torch
from safetensors.torch import load_file

from helpers import train_in_process

#: a NaN loss at update 2, checkpoints
DRILLED = dict(max_train_steps=4, inject_faults="nan_loss@2", checkpointing_steps=2, checkpoints_total_limit=3,
               lr_warmup_steps=0, lr_scheduler="constant")
#: torchao's AdamW quantizes a moment from 4,096 values, which no LoRA matrix of the tiny Sana (model width 32)
#: reaches: its drill lowers that size (:func:`_quantize_small_moments`), and rank 8 makes a 32-wide layer's matrices
#: a whole 8-bit block (256 values), so quantized moments are what it drills
LOW_BIT = {"adamw8bit": 8, "adamw4bit": 4}
#: each optimizer's flags: diffusers' examples' Prodigy (learning rate 1.0: Prodigy's multiplier); Adafactor as the
#: LoRA trainers set it, with a first moment (so every kind of its state is drilled); CAME with OneTrainer's weight
#: decay
OPTIMIZERS = {"prodigy": dict(optimizer="Prodigy", learning_rate=1.0),
              "adafactor": dict(optimizer="adafactor", learning_rate=1e-3, adafactor_beta1=0.9),
              "came": dict(optimizer="CAME", learning_rate=1e-3, adam_weight_decay=1e-2),
              "adamw8bit": dict(optimizer="AdamW8bit", learning_rate=1e-3, rank=8),
              "adamw4bit": dict(optimizer="adamw4bit", learning_rate=1e-3, rank=8)}


def _record(states):
    def on_step(step, model, optimizer):
        inner = getattr(optimizer, "optimizer", optimizer)
        group = {k: v.clone() for k, v in inner.param_groups[0].items() if isinstance(v, torch.Tensor) and k != "lr"}
        held = {f"{i}.{k}": v.clone() for i, s in enumerate(inner.state.values()) for k, v in s.items()
                if isinstance(v, torch.Tensor)}
        states[step] = {"params": {n: p.detach().clone() for n, p in model.named_parameters() if p.requires_grad},
                        "state": {**group, **held}}
    return on_step


def _quantize_small_moments(monkeypatch) -> None:
    """torchao's choice of which moments to quantize (``_AdamBase._new_buffer``: a whole number of blocks, from 4,096
    values), without the 4,096."""
    from torchao.optim.adam import _AdamBase

    def new_buffer(self, p, signed):
        if p.numel() % self.block_size:
            return torch.zeros_like(p)
        return self._subclass_zeros(p, signed, self.block_size)

    monkeypatch.setattr(_AdamBase, "_new_buffer", new_buffer)


def _recorded_audits(monkeypatch) -> list:
    """The SyncAudit of each run the test starts (to read what it saw)."""
    from dit_lora.training import drills
    from dit_lora.training.sync_audit import SyncAudit

    made = []

    class Recorded(SyncAudit):
        def __init__(self, *args, **kwargs):
            super().__init__(*args, **kwargs)
            made.append(self)

    monkeypatch.setattr(drills, "SyncAudit", Recorded)
    return made


def _counts(state: dict) -> set[float]:
    """The optimizer's update counts in a recorded state: Prodigy's ``k``, the others' per-weight ``step``."""
    return {v.item() for k, v in state.items() if k == "k" or k.endswith(".step")}


@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(OPTIMIZERS))
def test_a_nan_step_is_skipped_whole_nothing_syncs_and_a_resume_is_bitwise(name, tiny_sana, shapes_data, tmp_path,
                                                                           monkeypatch):
    monkeypatch.setenv("DIT_LORA_SYNC_DEBUG", "1")  # a host read inside a step raises
    audits = _recorded_audits(monkeypatch)
    if name in LOW_BIT:
        _quantize_small_moments(monkeypatch)
    flags = {**OPTIMIZERS[name], **DRILLED}
    states: dict[int, dict] = {}
    summary, out = train_in_process(tiny_sana, shapes_data, tmp_path / "ref", on_step=_record(states), **flags)
    assert isinstance(summary, dict) and summary["status"] == "completed", summary
    (audit,) = audits  # every step audited
    assert audit.enabled and audit.steps >= 4
    # torchao's update, a compiled graph per parameter: the audit's one exception (sync_audit.compiled_region)
    assert (audit.compiled > 0) == (name in LOW_BIT)
    assert summary["skipped_steps"] == 1 and summary["config"]["optimizer"] == name
    for part in ("params", "state"):  # update 2 was skipped: nothing moved
        assert states[2][part].keys() == states[1][part].keys()
        assert all(torch.equal(states[2][part][k], states[1][part][k]) for k in states[1][part]), part
    assert not all(torch.equal(states[3]["params"][k], states[2]["params"][k]) for k in states[2]["params"])
    assert _counts(states[4]["state"]) == {3.0}  # four updates, one skipped
    if name == "prodigy":
        assert states[4]["state"]["d_numerator"].item() != 0  # estimating
    if name == "came":  # the instabilities, CAME's own state, moved and were drilled
        assert any(k.endswith(".exp_avg_res_row") and states[4]["state"][k].any() for k in states[4]["state"])
    if name in LOW_BIT:  # quantized moments were drilled: their codes, block scales and tables
        assert {k.partition(".")[2] for k in states[4]["state"]} >= {"exp_avg.codes", "exp_avg_sq.scale", "step"}

    resumed_out = tmp_path / "resumed" / "out"
    resumed_out.mkdir(parents=True)
    shutil.copytree(out / "checkpoint-2", resumed_out / "checkpoint-2")
    resumed, resumed_out = train_in_process(tiny_sana, shapes_data, tmp_path / "resumed",
                                            resume_from_checkpoint="latest", **flags)
    assert isinstance(resumed, dict) and resumed["steps_this_run"] == 2, resumed
    ref, got = (load_file(str(o / "pytorch_lora_weights.safetensors")) for o in (out, resumed_out))
    assert ref.keys() == got.keys() and all(torch.equal(ref[k], got[k]) for k in ref)
    assert resumed["loss_history"] == summary["loss_history"]


@pytest.mark.parametrize("name", sorted(OPTIMIZERS))
def test_the_optimizer_refuses_what_it_cannot_keep_its_promise_with(name):
    from dit_lora.config import parse_config
    from dit_lora.core.errors import UserError

    base = ["--family", "sana", "--pretrained_model_name_or_path", "me/model", "--train_data_dir", "/data",
            "--optimizer", name]
    with pytest.raises(UserError, match="two optimizers"):
        parse_config([*base, "--use_8bit_adam"])
    with pytest.raises(UserError, match="gradient scaler"):
        parse_config([*base, "--mixed_precision", "fp16", "--allow_fp16"])
    assert parse_config(base).training.optimizer == name


def test_an_optimizers_own_options_need_that_optimizer():
    from dit_lora.config import parse_config
    from dit_lora.core.errors import UserError

    base = ["--family", "sana", "--pretrained_model_name_or_path", "me/model", "--train_data_dir", "/data"]
    with pytest.raises(UserError, match=r"--adafactor_beta1 sets Adafactor, but the optimizer is adamw"):
        parse_config([*base, "--adafactor_beta1", "0.9"])
    with pytest.raises(UserError, match=r"--prodigy_beta3, --prodigy_decouple set Prodigy, but the optimizer is "
                                        r"adafactor, which never reads them"):
        parse_config([*base, "--optimizer", "adafactor", "--prodigy_beta3", "0.9", "--prodigy_decouple", "false"])
    with pytest.raises(UserError, match=r"--adam_beta1, --adam_epsilon with --optimizer adafactor"):
        parse_config([*base, "--optimizer", "adafactor", "--adam_beta1", "0.8", "--adam_epsilon", "1e-6"])
    cfg = parse_config([*base, "--optimizer", "Adafactor", "--adafactor_beta1", "0.9"])
    assert (cfg.training.optimizer, cfg.training.adafactor_beta1) == ("adafactor", 0.9)
    with pytest.raises(UserError, match=r"--came_beta3 sets CAME, but the optimizer is prodigy"):
        parse_config([*base, "--optimizer", "prodigy", "--came_beta3", "0.999"])
    with pytest.raises(UserError, match=r"--adam_epsilon with --optimizer came: CAME has no Adam epsilon"):
        parse_config([*base, "--optimizer", "came", "--adam_epsilon", "1e-6"])
    cfg = parse_config([*base, "--optimizer", "CAME", "--adam_beta1", "0.8", "--came_beta3", "0.999",
                        "--came_clip_threshold", "0.5"])
    assert cfg.training.optimizer == "came"
    assert (cfg.training.adam_beta1, cfg.training.came_beta3, cfg.training.came_clip_threshold) == (0.8, 0.999, 0.5)
