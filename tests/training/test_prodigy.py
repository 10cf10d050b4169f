"""dit_lora.training.prodigy: prodigyopt's Prodigy, step for step, with the guard's skip and no host read."""

from __future__ import annotations

import copy

import pytest
import torch
from optimizer_state import gradients, in_lockstep, kept_step, same, snapshot

from dit_lora.training.prodigy import DeviceProdigy

prodigyopt = pytest.importorskip("prodigyopt")  # a dev dependency (pyproject's dev extra): the reference


def _params(seed: int = 0) -> list[torch.nn.Parameter]:
    g = torch.Generator().manual_seed(seed)
    # a LoRA's pair: lora_A random, lora_B zero (prodigyopt keeps a scalar p0 for it); odd sizes
    return [torch.nn.Parameter(torch.randn(4, 33, generator=g)), torch.nn.Parameter(torch.zeros(17, 4))]


@pytest.mark.parametrize("options", [
    {},
    {"use_bias_correction": True, "safeguard_warmup": True, "weight_decay": 0.01},
    {"decouple": False, "weight_decay": 0.1, "betas": (0.0, 0.99), "beta3": 0.9, "growth_rate": 1.02},
    {"slice_p": 3, "d_coef": 2.0, "lr": 0.5},
])
def test_every_step_equals_prodigyopts(options):
    ours, theirs = _params(), _params()
    mine, ref = DeviceProdigy(ours, **options), prodigyopt.Prodigy(theirs, **options)
    for _ in in_lockstep(ours, theirs, (mine, ref), 6):
        for p, q in zip(ours, theirs):
            torch.testing.assert_close(p.detach(), q.detach(), rtol=2e-6, atol=1e-9)
        group, reference = mine.param_groups[0], ref.param_groups[0]
        assert group["d"].item() == pytest.approx(reference["d"], rel=1e-9)
        assert group["d_max"].item() == pytest.approx(reference["d_max"], rel=1e-9)
        assert group["k"].item() == reference["k"]


def test_a_skipped_step_changes_no_parameter_moment_estimate_or_count_and_the_run_goes_on_as_without_it():
    ours, plain = _params(), _params()
    guarded, reference = DeviceProdigy(ours), DeviceProdigy(plain)
    for step in range(3):  # the same updates, and a skipped one with a NaN gradient in the middle of them
        kept_step(step, guarded, ours, reference, plain)
        if step == 1:
            before = snapshot(guarded, ours)
            for p in ours:
                p.grad = torch.full_like(p, float("nan"))
            guarded.found_inf = torch.ones(())
            guarded.step()
            assert same(snapshot(guarded, ours), before)
    for p, q in zip(ours, plain):
        assert torch.equal(p.detach(), q.detach())


@pytest.mark.parametrize("betas", [(0.9, 0.999), (0.0, 0.999)])
def test_a_skipped_first_step_and_a_zero_gradient_change_nothing(betas):
    """The first step skipped (its estimate 0/0) and then an all-zero gradient (prodigyopt waits: no step, no count):
    every parameter stays finite and where it was."""
    params = _params()
    opt = DeviceProdigy(params, betas=betas)
    start = [p.detach().clone() for p in params]
    for p in params:
        p.grad = torch.full_like(p, float("nan"))
    opt.found_inf = torch.ones(())
    opt.step()
    for p in params:
        p.grad = torch.zeros_like(p)
    opt.found_inf = torch.zeros(())
    opt.step()
    assert all(torch.equal(p.detach(), q) for p, q in zip(params, start))
    assert opt.param_groups[0]["k"].item() == 0 and opt.param_groups[0]["d"].item() == 1e-6


def test_the_state_resumes_bitwise_and_the_step_reads_nothing_back():
    from dit_lora.training.sync_audit import SyncAudit

    params = _params()
    opt = DeviceProdigy(params, use_bias_correction=True)
    for step in range(2):
        for p, grad in zip(params, gradients(step, params)):
            p.grad = grad
        opt.step()
    copies = [torch.nn.Parameter(p.detach().clone()) for p in params]
    resumed = DeviceProdigy(copies, use_bias_correction=True)
    resumed.load_state_dict(copy.deepcopy(opt.state_dict()))
    for p, q, grad in zip(params, copies, gradients(5, params)):
        p.grad, q.grad = grad.clone(), grad.clone()
    with SyncAudit(torch.device("cpu"), enabled=True).step():  # a host read in the step raises (as a GPU would sync)
        opt.step()
    resumed.step()
    for p, q in zip(params, copies):
        assert torch.equal(p.detach(), q.detach())


def test_groups_step_with_their_own_learning_rates():
    a, b = _params(1), _params(1)
    opt = DeviceProdigy([{"params": a[:1], "lr": 1.0}, {"params": a[1:], "lr": 0.25}])
    one = DeviceProdigy([{"params": b[:1], "lr": 1.0}, {"params": b[1:], "lr": 1.0}])
    for p, q, grad in zip(a, b, gradients(0, a)):
        p.grad, q.grad = grad.clone(), grad.clone()
    opt.step()
    one.step()
    assert torch.equal(a[0].detach(), b[0].detach()) or not torch.equal(a[1].detach(), b[1].detach())
    moved_a, moved_b = (a[1] - torch.zeros(17, 4)).abs().sum(), (b[1] - torch.zeros(17, 4)).abs().sum()
    assert 0 < moved_a < moved_b


def test_the_guards_rollback_restores_the_estimate_too_and_through_a_checkpoint():
    """Prodigy's estimate and counts live in the parameter group: the guard's snapshot keeps them (and a checkpoint's
    copy of the snapshot), so a rollback restores the optimizer whole."""
    from dit_lora.training.guard import StepGuard

    model = torch.nn.Linear(6, 3)
    opt = DeviceProdigy(model.parameters())
    guard = StepGuard(opt, [lambda k: 1.0], 10, torch.device("cpu"), enabled=True, fused=True, interval=2,
                      max_consecutive_skips=2, rollback_lr_factor=0.5, max_rollbacks=2, spike_sigma=None,
                      world_size=1)

    def update(seed):
        for p in model.parameters():
            p.grad = torch.randn(p.shape, generator=torch.Generator().manual_seed(seed))
        opt.found_inf = torch.zeros(())
        opt.step()

    update(0)
    guard.take_snapshot(model, 1)
    kept = {k: v.clone() for k, v in opt.param_groups[0].items() if k in ("d", "d_max", "d_numerator", "k")}
    saved = guard.snapshot_tensors(model)
    for seed in (1, 2):
        update(seed)
    assert opt.param_groups[0]["k"].item() == 3 and not torch.equal(opt.param_groups[0]["d_numerator"],
                                                                     kept["d_numerator"])
    guard.roll_back(model, 3)
    assert all(torch.equal(opt.param_groups[0][k], v) for k, v in kept.items())
    for seed in (1, 2):
        update(seed)
    guard.load_snapshot_tensors(model, saved)  # a resumed run's copy of the snapshot, from its checkpoint
    guard.roll_back(model, 3)
    assert all(torch.equal(opt.param_groups[0][k], v) for k, v in kept.items())
