"""training/recovery.py: what a guard check does on the host (snapshot, rollback, stop) and the end-of-run verdict.

Stand-ins for the accelerator and the data; a real StepGuard on a tiny model. The diagnosis replay and the drills
on a real family are tests/training/test_diagnose.py's and tests/e2e/test_guard_drills.py's.
"""

from __future__ import annotations

import json

import pytest
import torch

from dit_lora.output.names import NONFINITE_REPORT_FILE
from dit_lora.training.guard import GuardReading, StepGuard
from dit_lora.training.recovery import Recovery, RunStopped, RunUnhealthy
from config_stand_in import stand_in


class Accelerator:
    is_main_process = True

    @staticmethod
    def unwrap_model(model):
        return model


def make(tmp_path, *, max_rollbacks=1, enabled=True, max_skipped_fraction=0.5):
    model = torch.nn.Linear(2, 1)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    guard = StepGuard(opt, [lambda k: 1.0], 16, torch.device("cpu"), enabled=enabled, fused=False, interval=4,
                      max_consecutive_skips=2, rollback_lr_factor=0.5, max_rollbacks=max_rollbacks,
                      spike_sigma=None, world_size=1)
    cfg = stand_in(output_dir=str(tmp_path), max_skipped_fraction=max_skipped_fraction)
    log: list[str] = []
    recovery = Recovery(guard=guard, accelerator=Accelerator(), spec=None, comps=None, cfg=cfg, data=None,
                        order=None, injector=None, load_batch=lambda batch, step: batch, log=log.append)
    return recovery, model, log


def reading(*, skipped=0, flags=(False,) * 4, consecutive=0, streak=0, applied=4):
    return GuardReading(skipped=skipped, nonfinite_losses=skipped, nonfinite_grads=0, loss_spikes=0,
                        consecutive=consecutive, longest_streak=streak, applied=applied, window_loss=0.1,
                        window_steps=len(flags), window_applied=len(flags) - sum(flags), window_flags=list(flags),
                        grad_norm=1.0, learning_rates=[0.1])


def test_start_snapshots_once_and_a_clean_window_moves_the_snapshot(tmp_path, monkeypatch):
    recovery, model, log = make(tmp_path)
    diagnosed = []
    monkeypatch.setattr(recovery, "_diagnose", lambda slot, *a: diagnosed.append(slot))
    recovery.start(model, 0)
    assert recovery.guard.has_snapshot and recovery.guard.snapshot_step == 0
    recovery.record(0, 1, 0, 0, torch.Generator().manual_seed(0))
    assert len(recovery.records[0]) == 1
    recovery.at_check(4, reading(), model)
    assert recovery.guard.snapshot_step == 4 and recovery.records == {} and log == []
    recovery.at_check(8, reading(flags=(False, True, True, False), skipped=2), model)  # half bad: kept at 4
    assert recovery.guard.snapshot_step == 4 and diagnosed == [1]  # the first bad slot is diagnosed


def test_a_streak_rolls_back_then_stops_with_the_report(tmp_path, monkeypatch):
    recovery, model, log = make(tmp_path, max_rollbacks=1)
    monkeypatch.setattr(recovery, "_diagnose", lambda *a: None)  # the replay is tested elsewhere
    recovery.start(model, 0)
    before = model.weight.detach().clone()
    with torch.no_grad():
        model.weight.add_(1.0)
    bad = reading(flags=(True,) * 4, skipped=4, consecutive=4, streak=4, applied=0)
    recovery.at_check(4, bad, model)
    assert torch.equal(model.weight, before)  # back to the snapshot
    assert log and "rolled back to the weights and optimizer state of step 0" in log[0] and "rollback 1 of at most 1" \
        in log[0]
    with pytest.raises(RunStopped, match="Training stopped at step 8: 4 steps in a row") as err:
        recovery.at_check(8, bad, model)
    assert err.value.exit_code == 3
    report = json.loads((tmp_path / NONFINITE_REPORT_FILE).read_text())
    assert report["status"] == "stopped" and report["skipped_steps"] == 4 and len(report["rollbacks"]) == 2


def test_verdict(tmp_path):
    recovery, _, _ = make(tmp_path, max_skipped_fraction=0.25)
    assert recovery.verdict(reading(skipped=2, applied=8), reading(), 10) is None
    text = recovery.verdict(reading(skipped=3, applied=7), reading(), 10)
    assert "3 of its 10 updates (30%) were skipped" in text and "(--max_skipped_fraction 0.25)" in text
    assert "after 7 applied updates" in text and str(tmp_path) in text
    last_empty = recovery.verdict(reading(skipped=1, applied=9), reading(flags=(True,) * 4), 10)
    assert "including every update of the last check window" in last_empty
    assert recovery.verdict(reading(skipped=9), None, 0) is None
    off, _, _ = make(tmp_path, enabled=False)
    assert off.verdict(reading(skipped=10, applied=0), None, 10) is None
    assert issubclass(RunUnhealthy, RunStopped)


def test_the_fault_replay_adds_the_class_images_loss_as_the_step_does():
    from types import SimpleNamespace

    from dit_lora.data.batches import PRIOR

    def compute_loss(comps, model, batch, generator, cfg):
        return torch.tensor(float(batch["value"]))

    fake = SimpleNamespace(spec=SimpleNamespace(loss=SimpleNamespace(compute_loss=compute_loss)), comps=None,
                           cfg=None, injector=None, data=SimpleNamespace(sets=SimpleNamespace(prior_loss_weight=0.5)))
    loss_fn = Recovery._loss_fn(fake, 3)
    assert loss_fn(None, {"value": 1.0, PRIOR: {"value": float("nan")}}, None).isnan()
    assert loss_fn(None, {"value": 1.0, PRIOR: {"value": 4.0}}, None).item() == 3.0
    assert loss_fn(None, {"value": 1.0}, None).item() == 1.0
