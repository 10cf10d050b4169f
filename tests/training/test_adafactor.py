"""dit_lora.training.adafactor: transformers' Adafactor (fixed learning rate), step for step, with the guard's skip
and no host read."""

from __future__ import annotations

import pytest
import torch
from optimizer_state import gradients, in_lockstep, kept_step, resumed_pair, same, snapshot
from transformers.optimization import Adafactor

from dit_lora.training.adafactor import DeviceAdafactor


def _params(seed: int = 0) -> list[torch.nn.Parameter]:
    g = torch.Generator().manual_seed(seed)
    # a LoRA's pair (lora_B starts at zero), odd sizes, and a 1-D weight (a trained norm: not factored)
    return [torch.nn.Parameter(torch.randn(4, 33, generator=g)), torch.nn.Parameter(torch.zeros(17, 4)),
            torch.nn.Parameter(torch.randn(9, generator=g))]


_TRANSFORMERS = {"relative_step": False, "warmup_init": False}


@pytest.mark.parametrize("options", [
    {"lr": 1e-3},
    {"lr": 3e-2, "beta1": 0.9, "weight_decay": 0.01, "clip_threshold": 0.5},
    {"lr": 1e-2, "scale_parameter": True, "decay_rate": -0.5, "eps": (1e-30, 1e-2)},
])
def test_every_step_equals_transformers(options):
    ours, theirs = _params(), _params()
    mine = DeviceAdafactor(ours, **options)
    ref = Adafactor(theirs, **{"scale_parameter": False, **options, **_TRANSFORMERS})
    for _ in in_lockstep(ours, theirs, (mine, ref), 6):
        for p, q in zip(ours, theirs):
            torch.testing.assert_close(p.detach(), q.detach(), rtol=2e-6, atol=1e-9)
        for p, q in zip(ours, theirs):
            assert mine.state[p]["step"].item() == ref.state[q]["step"]
            for key in ("exp_avg_sq_row", "exp_avg_sq_col", "exp_avg_sq", "exp_avg"):
                assert (key in mine.state[p]) == (key in ref.state[q])
                if key in ref.state[q]:
                    torch.testing.assert_close(mine.state[p][key], ref.state[q][key], rtol=2e-6, atol=1e-9)


@pytest.mark.parametrize("skipped", [0, 1])
def test_a_skipped_step_changes_nothing_and_the_run_goes_on_as_without_it(skipped):
    """Skipped at the first step (no state yet: it is made, empty of updates) or a later one: parameters, moments,
    counts and RMS are what they were, and the steps after it equal a run that never had it."""
    options = {"lr": 1e-2, "beta1": 0.9, "weight_decay": 0.01, "scale_parameter": True}
    ours, plain = _params(), _params()
    guarded, reference = DeviceAdafactor(ours, **options), DeviceAdafactor(plain, **options)
    for step in range(3):
        if step == skipped:
            before = snapshot(guarded, ours)
            # NaN, Inf, and finite values whose squares overflow (an unclipped run's skipped step)
            for p, bad in zip(ours, (float("nan"), float("inf"), 3e19)):
                p.grad = torch.full_like(p, bad)
            guarded.found_inf = torch.ones(())
            guarded.step()
            after = snapshot(guarded, ours)
            assert same(after[0], before[0])
            kept = after[1]["state"]
            assert all(s["step"].item() == 0 or same(s, before[1]["state"][i]) for i, s in kept.items())
        kept_step(step, guarded, ours, reference, plain)
    for p, q in zip(ours, plain):
        assert torch.equal(p, q)
    assert same(guarded.state_dict()["state"], reference.state_dict()["state"])


def test_its_state_round_trips_through_a_state_dict():
    """A resumed optimizer (state loaded into a new one) steps on as the one that was saved."""
    first, ours, second, other = resumed_pair(lambda ps: DeviceAdafactor(ps, lr=1e-2, beta1=0.9), _params)
    for p, q in zip(ours, other):
        assert torch.equal(p, q)
    assert same(first.state_dict()["state"], second.state_dict()["state"])


@pytest.mark.parametrize("beta1", [None, 0.9])
def test_the_plan_counts_the_state_it_keeps(beta1):
    """config/optimizer_state.adafactor_state_bytes is the bytes of the tensors DeviceAdafactor keeps after a step."""
    from dit_lora.config.optimizer_state import adafactor_state_bytes

    params = _params()
    opt = DeviceAdafactor(params, lr=1e-3, beta1=beta1)
    for p, grad in zip(params, gradients(0, params)):
        p.grad = grad
    opt.step()
    kept = sum(v.numel() * v.element_size() for s in opt.state.values() for v in s.values())
    assert adafactor_state_bytes([tuple(p.shape) for p in params], first_moment=beta1) == kept


def test_groups_step_with_their_own_learning_rates():
    """LoRA+ and a trained backbone give groups their own rates (the guard writes each as a device tensor): each
    group steps as transformers' would with that group's rate."""
    ours, theirs = _params(), _params()
    rates = (3e-2, 1e-3)
    mine = DeviceAdafactor([{"params": ours[:2], "lr": rates[0]}, {"params": ours[2:], "lr": rates[1]}], lr=1.0)
    for group, rate in zip(mine.param_groups, rates):
        group["lr"] = torch.tensor(rate)  # as the guard sets it
    ref = Adafactor([{"params": theirs[:2], "lr": rates[0]}, {"params": theirs[2:], "lr": rates[1]}], lr=1.0,
                    scale_parameter=False, **_TRANSFORMERS)
    for _ in in_lockstep(ours, theirs, (mine, ref), 3):
        for p, q in zip(ours, theirs):
            torch.testing.assert_close(p.detach(), q.detach(), rtol=2e-6, atol=1e-9)
