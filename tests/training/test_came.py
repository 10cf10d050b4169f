"""dit_lora.training.came: came-pytorch's CAME, step for step, with the guard's skip and no host read."""

from __future__ import annotations

import pytest
import torch
from optimizer_state import gradients, in_lockstep, kept_step, resumed_pair, same, snapshot

from dit_lora.training.came import DeviceCAME

CAME = pytest.importorskip("came_pytorch").CAME  # a dev dependency (pyproject's dev extra): the reference


def _params(seed: int = 0) -> list[torch.nn.Parameter]:
    g = torch.Generator().manual_seed(seed)
    # a LoRA's pair (lora_B starts at zero), odd sizes, a 1-D weight (a trained norm: not factored) and a 3-D one
    # (factored over its last two dimensions)
    return [torch.nn.Parameter(torch.randn(4, 33, generator=g)), torch.nn.Parameter(torch.zeros(17, 4)),
            torch.nn.Parameter(torch.randn(9, generator=g)), torch.nn.Parameter(torch.randn(3, 5, 7, generator=g))]


def _as_the_guard_sets_it(opt: DeviceCAME) -> float:
    """Each group's learning rate as the guard writes it (an fp32 device tensor); returns the first as the float
    came-pytorch is given for it."""
    for group in opt.param_groups:
        group["lr"] = torch.tensor(group["lr"], dtype=torch.float32)
    return opt.param_groups[0]["lr"].item()


_OPTIONS = [
    {"lr": 1e-3},
    {"lr": 3e-2, "weight_decay": 0.01, "clip_threshold": 0.5, "betas": (0.8, 0.99, 0.999)},
    {"lr": 1e-2, "weight_decay": 0.1, "eps": (1e-20, 1e-10), "betas": (0.0, 0.9, 0.99)},
]


@pytest.mark.parametrize("options", _OPTIONS)
def test_every_step_equals_came_pytorch_to_the_bit(options):
    """Each operation is came-pytorch's, in its order (an increment x 1.0 is exact), so a kept step is its step to
    the bit on a CPU: the parameters, the first moment, the factored second moments and instabilities."""
    ours, theirs = _params(), _params()
    mine = DeviceCAME(ours, **options)
    ref = CAME(theirs, **{**options, "lr": _as_the_guard_sets_it(mine)})
    for step in in_lockstep(ours, theirs, (mine, ref), 8):
        for p, q in zip(ours, theirs):
            assert torch.equal(p, q), step
            assert mine.state[p]["step"].item() == ref.state[q]["step"]
            assert set(mine.state[p]) == set(ref.state[q]) - {"RMS"}  # came-pytorch's RMS: read by no update
            for key, value in ref.state[q].items():
                if key not in ("step", "RMS"):
                    assert torch.equal(mine.state[p][key], value), (step, key)


@pytest.mark.parametrize("skipped", [0, 1])
def test_a_skipped_step_changes_nothing_and_the_run_goes_on_as_without_it(skipped):
    """Skipped at the first step (no state yet: it is made, empty of updates) or a later one: parameters, moments,
    instabilities and counts are what they were, and the steps after it equal a run that never had it."""
    options = {"lr": 1e-2, "weight_decay": 0.01}
    ours, plain = _params(), _params()
    guarded, reference = DeviceCAME(ours, **options), DeviceCAME(plain, **options)
    for step in range(3):
        if step == skipped:
            before = snapshot(guarded, ours)
            # NaN, Inf, finite values whose squares overflow (an unclipped run's skipped step), and NaN again
            for p, bad in zip(ours, (float("nan"), float("inf"), 3e19, float("nan"))):
                p.grad = torch.full_like(p, bad)
            guarded.found_inf = torch.ones(())
            guarded.step()
            after = snapshot(guarded, ours)
            assert same(after[0], before[0])
            kept = after[1]["state"]
            if skipped == 0:  # made at the skipped step, and as empty as a state made before any update
                assert all(s["step"].item() == 0 and all(not v.any() for v in s.values()) for s in kept.values())
            else:
                assert same(kept, before[1]["state"])
        kept_step(step, guarded, ours, reference, plain)
    for p, q in zip(ours, plain):
        assert torch.equal(p, q)
    assert same(guarded.state_dict()["state"], reference.state_dict()["state"])


def test_its_state_round_trips_through_a_state_dict():
    """A resumed optimizer (state loaded into a new one) steps on as the one that was saved."""
    first, ours, second, other = resumed_pair(lambda ps: DeviceCAME(ps, lr=1e-2, weight_decay=0.01), _params)
    assert all(s["step"].dtype == torch.float64 for s in second.state.values())  # torch keeps a "step" as it is
    for p, q in zip(ours, other):
        assert torch.equal(p, q)
    assert same(first.state_dict()["state"], second.state_dict()["state"])


def test_the_plan_counts_the_state_it_keeps():
    """config/optimizer_state.came_state_bytes is the bytes of the tensors DeviceCAME keeps after a step."""
    from dit_lora.config.optimizer_state import came_state_bytes

    params = _params()
    opt = DeviceCAME(params, lr=1e-3)
    for p, grad in zip(params, gradients(0, params)):
        p.grad = grad
    opt.step()
    kept = sum(v.numel() * v.element_size() for s in opt.state.values() for v in s.values())
    assert came_state_bytes([tuple(p.shape) for p in params]) == kept


def test_groups_step_with_their_own_learning_rates():
    """LoRA+ and a trained backbone give groups their own rates (the guard writes each as a device tensor): each
    group steps as came-pytorch's would with that group's rate."""
    ours, theirs = _params(), _params()
    rates = (3e-2, 1e-3)
    mine = DeviceCAME([{"params": ours[:2], "lr": rates[0]}, {"params": ours[2:], "lr": rates[1]}], lr=1.0,
                      weight_decay=0.01)
    _as_the_guard_sets_it(mine)
    given = [g["lr"].item() for g in mine.param_groups]
    ref = CAME([{"params": theirs[:2], "lr": given[0]}, {"params": theirs[2:], "lr": given[1]}], lr=1.0,
               weight_decay=0.01)
    for _ in in_lockstep(ours, theirs, (mine, ref), 3):
        for p, q in zip(ours, theirs):
            assert torch.equal(p, q)


def test_betas_outside_0_1_are_refused():
    with pytest.raises(ValueError, match="decays in"):
        DeviceCAME(_params(), lr=1e-3, betas=(0.9, 1.5, 0.9999))
