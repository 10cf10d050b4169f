"""StepGuard on its own: skips change nothing, streaks roll back whatever their phase, counters add up.

No recipe, no model files: a two-layer toy model, fused AdamW on the CPU, and a driver that does
what the loop does (one guarded update per step, a host read every ``interval`` steps).
"""

from __future__ import annotations

import itertools

import pytest
import torch

from dit_lora.training.guard import StepGuard


class Driver:
    """The loop's use of the guard, minus data: step, read at checks, roll back when told."""

    def __init__(self, max_consecutive_skips: int, interval: int, max_steps: int = 64, seed: int = 0):
        torch.manual_seed(seed)
        self.model = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.Tanh(), torch.nn.Linear(8, 1))
        self.opt = torch.optim.AdamW(self.model.parameters(), lr=1e-2, fused=True)
        self.guard = StepGuard(self.opt, [lambda k: 1.0], max_steps, torch.device("cpu"), enabled=True, fused=True,
                               interval=interval, max_consecutive_skips=max_consecutive_skips, rollback_lr_factor=0.5,
                               max_rollbacks=100, spike_sigma=None, world_size=1)
        self.guard.take_snapshot(self.model, 0)
        self.interval, self.step_no = interval, 0
        self.rollback_steps: list[int] = []
        self.readings = []

    def step(self, bad: bool) -> None:
        self.step_no += 1
        x = torch.randn(5, 4)
        loss = self.model(x).pow(2).mean()
        loss.backward()
        if bad:
            loss = loss.detach() * float("nan")
        norm = torch.nn.utils.get_total_norm([p.grad for p in self.model.parameters()])
        self.guard.step(self.opt, self.opt, loss, norm, (self.step_no - 1) % self.interval)
        self.opt.zero_grad(set_to_none=True)
        if self.step_no % self.interval == 0:
            reading = self.guard.read()
            self.readings.append(reading)
            if self.guard.should_roll_back(reading):
                self.guard.roll_back(self.model, self.step_no)
                self.rollback_steps.append(self.step_no)


@pytest.mark.parametrize("max_skips,interval", [(2, 2), (3, 3), (5, 5), (8, 8), (8, 4), (4, 10)])
def test_every_streak_of_the_limit_rolls_back_at_the_next_check_whatever_its_phase(max_skips, interval):
    for start, extra in itertools.product(range(1, interval + 2), range(0, interval + 2)):
        length = max_skips + extra
        d = Driver(max_skips, interval)
        for _ in range(start - 1):
            d.step(bad=False)
        for _ in range(length):
            d.step(bad=True)
        end = d.step_no
        while d.step_no < end + 2 * interval:
            d.step(bad=False)
        next_check = -(-(start - 1 + max_skips) // interval) * interval  # first check once the streak reached the limit
        assert d.rollback_steps, f"streak of {length} from step {start} (interval {interval}) never rolled back"
        assert d.rollback_steps[0] == next_check, (start, length, d.rollback_steps)


@pytest.mark.parametrize("max_skips,interval", [(3, 3), (8, 8), (8, 4)])
def test_streaks_shorter_than_the_limit_never_roll_back(max_skips, interval):
    for start in range(1, interval + 2):
        d = Driver(max_skips, interval)
        for _ in range(start - 1):
            d.step(bad=False)
        for _ in range(4):  # four streaks of limit-1, each followed by one good step
            for _ in range(max_skips - 1):
                d.step(bad=True)
            d.step(bad=False)
        while d.step_no % interval:
            d.step(bad=False)
        assert d.rollback_steps == [], (start, d.rollback_steps)
        assert sum(r.skipped for r in d.readings[-1:]) == 4 * (max_skips - 1)


def test_a_skipped_step_changes_nothing_and_counters_add_up():
    d = Driver(max_consecutive_skips=8, interval=4)
    for _ in range(3):
        d.step(bad=False)
    before = {n: p.detach().clone() for n, p in d.model.named_parameters()}
    moments = {k: v.clone() for k, v in d.opt.state[next(d.model.parameters())].items()}
    lr_before = d.opt.param_groups[0]["lr"].clone()
    d.step(bad=True)
    for n, p in d.model.named_parameters():
        assert torch.equal(p, before[n]), n
    for k, v in d.opt.state[next(d.model.parameters())].items():
        assert torch.equal(v, moments[k]), k
    assert torch.equal(d.opt.param_groups[0]["lr"], lr_before)
    reading = d.readings[-1]
    assert (reading.skipped, reading.nonfinite_losses, reading.applied, reading.window_applied) == (1, 1, 3, 3)
    assert reading.window_flags == [False, False, False, True] and reading.longest_streak == 1


def test_guard_state_round_trips_through_its_state_dict():
    a = Driver(max_consecutive_skips=3, interval=3)
    for bad in (False, True, True, False, True):
        a.step(bad)
    b = Driver(max_consecutive_skips=3, interval=3, seed=1)
    b.guard.load_state_dict(a.guard.state_dict())
    assert torch.equal(a.guard.counts, b.guard.counts)
    assert [float(g["lr"]) for g in a.opt.param_groups] == [float(g["lr"]) for g in b.opt.param_groups]


def test_a_non_fused_optimizer_gets_host_learning_rates_and_honours_every_skip():
    """bitsandbytes' 8-bit AdamW reads a tensor LR with one sync per parameter: it gets floats instead,
    set from the schedule in the step's single transfer; a skipped step still changes nothing."""
    bnb = pytest.importorskip("bitsandbytes")
    from dit_lora.training.sync_audit import SyncAudit

    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(64, 64), torch.nn.Linear(64, 1))
    opt = bnb.optim.AdamW8bit(model.parameters(), lr=1e-2)
    guard = StepGuard(opt, [lambda k: 1.0 / (k + 1)], 8, torch.device("cpu"), enabled=True, fused=False, interval=4,
                      max_consecutive_skips=8, rollback_lr_factor=0.5, max_rollbacks=1, spike_sigma=None, world_size=1)
    audit = SyncAudit(torch.device("cpu"), enabled=True)
    seen = []
    for step in range(1, 7):
        loss = model(torch.randn(8, 64)).pow(2).mean()
        loss.backward()
        if step == 3:
            loss = loss.detach() * float("nan")
        before = [p.detach().clone() for p in model.parameters()]
        norm = torch.nn.utils.get_total_norm([p.grad for p in model.parameters()])
        with audit.step():  # the 8-bit step itself reads no tensor value (it used to, once per parameter)
            guard.step(opt, opt, loss, norm, (step - 1) % 4)
        opt.zero_grad(set_to_none=True)
        unchanged = all(torch.equal(a, b) for a, b in zip(before, model.parameters()))
        assert unchanged == (step == 3), step
        seen.append(opt.param_groups[0]["lr"])
    assert all(isinstance(lr, float) for lr in seen)
    # the LR each update ran with: the schedule advances by applied updates only (step 3 was skipped)
    assert seen == pytest.approx([1e-2, 1e-2 / 2, 1e-2 / 2, 1e-2 / 3, 1e-2 / 4, 1e-2 / 5])


def test_drill_switches_are_parsed_once_and_malformed_ones_stop_the_run(monkeypatch):
    """Hooks.from_config reads --inject_faults, DIT_LORA_FAULT and DIT_LORA_SYNC_DEBUG together, before loading."""
    from dit_lora.core.errors import UserError
    from dit_lora.training.drills import Hooks

    monkeypatch.delenv("DIT_LORA_FAULT", raising=False)
    monkeypatch.delenv("DIT_LORA_SYNC_DEBUG", raising=False)
    quiet = Hooks.from_config(None, 0, torch.device("cpu"))
    assert quiet.injector is None and quiet.crash_at is None and not quiet.sync_audit.enabled
    quiet.crash_point("micro_batch", 6)  # no crash point configured: returns
    monkeypatch.setenv("DIT_LORA_FAULT", "checkpoint_after_rename:4")
    monkeypatch.setenv("DIT_LORA_SYNC_DEBUG", "1")
    armed = Hooks.from_config("nan_loss@3", 0, torch.device("cpu"))
    assert armed.crash_at == ("checkpoint_after_rename", 4) and armed.sync_audit.enabled and armed.injector is not None
    armed.crash_point("checkpoint_after_rename", 3)  # another step: returns
    monkeypatch.setenv("DIT_LORA_FAULT", "after_everything:4")
    with pytest.raises(UserError, match="micro_batch, checkpoint_before_marker, checkpoint_after_rename"):
        Hooks.from_config(None, 0, torch.device("cpu"))


# ---- fp16 loss scaling and non-fused optimizers, on the CPU ----------------------------------------------
# The loop's other two optimizer paths: GradScaler's fp16 step (accelerate's AcceleratedOptimizer calls
# scaler.step + scaler.update) and an optimizer without the fused found_inf hook (bitsandbytes' 8-bit AdamW,
# PyTorch's single-tensor AdamW). Each drive checks, at every step: a non-finite step changes no parameter, no
# optimizer state and not the schedule position; an applied step runs with the schedule's LR for the number of
# updates applied so far; and the step's host syncs are counted by the sync audit.

SCHEDULE = [lambda k: 1.0 / (k + 1)]  # a distinct LR for every applied update
BASE_LR = 1e-2


class _ScaledOptimizer:
    """What accelerate's AcceleratedOptimizer does under fp16: step() is scaler.step(inner) then scaler.update()."""

    def __init__(self, optimizer, scaler):
        self.optimizer, self.scaler = optimizer, scaler

    @property
    def param_groups(self):
        return self.optimizer.param_groups

    def step(self):
        self.scaler.step(self.optimizer)
        self.scaler.update()


def _state_copy(model, opt) -> dict:
    """Parameters, every optimizer state entry (tensors and host numbers) and the group LRs, copied."""
    out = {f"p/{n}": p.detach().clone() for n, p in model.named_parameters()}
    for i, p in enumerate(model.parameters()):
        for k, v in opt.state.get(p, {}).items():
            out[f"s/{i}/{k}"] = v.detach().clone() if isinstance(v, torch.Tensor) else v
    return out


def _unchanged(a: dict, b: dict) -> bool:
    return a.keys() == b.keys() and all(
        torch.equal(a[k], b[k]) if isinstance(a[k], torch.Tensor) else a[k] == b[k] for k in a)


def _guarded_run(make_opt, *, fused: bool, bad_steps, steps=6, max_grad_norm=0.0, fp16=False):
    """Train a toy model for ``steps`` guarded updates with NaN losses (finite gradients) at ``bad_steps``.

    Returns (model, per-step records, audit): each record holds the state before and after the step and the
    LR the update was to run with (read before the step, on the host, outside the audited block).
    """
    from types import SimpleNamespace

    from dit_lora.core.engine import EngineChoice
    from dit_lora.training.engine import make_engine
    from dit_lora.training.guard import _APPLIED
    from dit_lora.training.sync_audit import SyncAudit

    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(64, 64), torch.nn.Tanh(), torch.nn.Linear(64, 1))
    opt = make_opt(model.parameters())
    scaler = torch.amp.GradScaler("cpu", init_scale=2.0 ** 12) if fp16 else None
    outer = _ScaledOptimizer(opt, scaler) if fp16 else opt
    # the engine's clipping (DDP's) on a stand-in accelerator: fp16 unscales through the scaler, as accelerate's does
    accelerator = SimpleNamespace(
        scaler=scaler, unscale_gradients=lambda: scaler.unscale_(opt),
        clip_grad_norm_=lambda params, norm: (scaler and scaler.unscale_(opt),
                                              torch.nn.utils.clip_grad_norm_(params, norm))[1])
    engine = make_engine(EngineChoice("ddp", ()))
    engine.accelerator = accelerator
    guard = StepGuard(opt, SCHEDULE, steps, torch.device("cpu"), enabled=True, fused=fused, interval=steps,
                      max_consecutive_skips=8, rollback_lr_factor=0.5, max_rollbacks=1, spike_sigma=None, world_size=1)
    audit = SyncAudit(torch.device("cpu"), enabled=True)
    records = []
    for step in range(1, steps + 1):
        x = torch.randn(8, 64)
        before, applied = _state_copy(model, opt), int(guard.counts[_APPLIED])
        with audit.step():
            loss = model(x).pow(2).mean()
            (scaler.scale(loss) if fp16 else loss).backward()
            if step in bad_steps:
                loss = loss.detach() * float("nan")  # a non-finite loss with finite gradients
            norm = engine.clip(model, max_grad_norm)
            guard.step(outer, opt, loss, norm, step - 1, scaler)
            opt.zero_grad(set_to_none=True)
        records.append({"before": before, "after": _state_copy(model, opt), "applied_before": applied,
                        "applied_after": int(guard.counts[_APPLIED]),
                        "lr_after": float(opt.param_groups[0]["lr"])})
    return model, records, audit


def _assert_skips_change_nothing(records, bad_steps, *, host_lrs=False):
    """``host_lrs``: the non-fused path sets the LR an update runs with just before it (else: the next one's)."""
    applied = 0
    for step, rec in enumerate(records, 1):
        if step in bad_steps:
            assert _unchanged(rec["before"], rec["after"]), f"skipped step {step} changed the state"
            assert rec["applied_after"] == rec["applied_before"] == applied, step  # schedule position kept
        else:
            assert not _unchanged(rec["before"], rec["after"]), f"step {step} was not applied"
            applied += 1
            assert rec["applied_after"] == applied, step
            if host_lrs:  # the LR this update ran with: the schedule's at the updates applied before it
                assert rec["lr_after"] == pytest.approx(BASE_LR * SCHEDULE[0](applied - 1), rel=1e-6), step
        if not host_lrs:  # the LR installed for the next update: the schedule's at the updates applied so far
            assert rec["lr_after"] == pytest.approx(BASE_LR * SCHEDULE[0](applied), rel=1e-6), step


def _reference(make_opt, bad_steps, steps=6):
    """The same batches with the bad steps left out, each applied update at the schedule's LR: no guard."""
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(64, 64), torch.nn.Tanh(), torch.nn.Linear(64, 1))
    opt = make_opt(model.parameters())
    applied = 0
    for step in range(1, steps + 1):
        x = torch.randn(8, 64)
        if step in bad_steps:
            continue
        model(x).pow(2).mean().backward()
        for group in opt.param_groups:
            group["lr"] = BASE_LR * SCHEDULE[0](applied)
        opt.step()
        opt.zero_grad(set_to_none=True)
        applied += 1
    return model


@pytest.mark.parametrize("max_grad_norm", [0.0, 1.0])
def test_fp16_loss_scaling_honours_every_skip_with_and_without_clipping(max_grad_norm):
    """GradScaler's fp16 step on the CPU with fused AdamW. With --max_grad_norm 0 nothing would unscale the
    gradients, GradScaler's found_inf would stay empty and its step would apply an update the guard skipped
    (a NaN loss has finite gradients): the engine's clip unscales, and the guard folds its flag in."""
    make = lambda params: torch.optim.AdamW(params, lr=BASE_LR, fused=True)  # noqa: E731
    bad = {3, 5}
    model, records, audit = _guarded_run(make, fused=True, bad_steps=bad, max_grad_norm=max_grad_norm, fp16=True)
    _assert_skips_change_nothing(records, bad)
    assert int(records[-1]["after"]["s/0/step"]) == 4  # the fused step count: applied updates only
    assert audit.passed == {}, audit.passed  # the fused path reads nothing on the host, scaler included
    if max_grad_norm == 0.0:  # nothing clipped: the updates are the unguarded ones (the loss scale is a power of 2;
        ref = _reference(make, bad)  # the fused kernel rounds a tensor LR and a float LR a last bit apart)
        for a, b in zip(model.parameters(), ref.parameters()):
            torch.testing.assert_close(a, b, rtol=1e-6, atol=1e-8)


def _adamw8bit(params):
    bnb = pytest.importorskip("bitsandbytes")
    return bnb.optim.AdamW8bit(params, lr=BASE_LR)


NON_FUSED = {
    "bitsandbytes_adamw8bit": _adamw8bit,
    "torch_adamw_single_tensor": lambda params: torch.optim.AdamW(params, lr=BASE_LR, foreach=False, fused=False),
}


@pytest.mark.parametrize("name", sorted(NON_FUSED))
def test_a_non_fused_optimizer_honours_every_skip_and_the_schedule_with_one_sync_per_step(name):
    """No found_inf hook: the guard reads the skip flag and schedule position once per step (the sync audit's one
    documented exception) and gives the optimizer host LRs, so it never reads a tensor LR once per parameter. A
    skipped step changes no parameter, no optimizer state (8-bit moments, quantization maps, step counts) and
    not the schedule; the applied updates are exactly those of an unguarded run without the bad steps."""
    make = NON_FUSED[name]
    bad = {2, 3, 6}
    model, records, audit = _guarded_run(make, fused=False, bad_steps=bad, steps=7)
    _assert_skips_change_nothing(records, bad, host_lrs=True)
    assert audit.passed == {"Tensor.tolist()": 7}, audit.passed  # one host read per step, none per parameter
    assert any("state1" in k for k in records[-1]["after"]) or name.startswith("torch")  # 8-bit state was checked
    ref = _reference(make, bad, steps=7)
    for a, b in zip(model.parameters(), ref.parameters()):
        assert torch.equal(a, b)


def test_a_run_builds_its_guard_from_the_guards_section():
    """The guard receives ``cfg.guards``, not the whole config: its five options read from there."""
    from dit_lora.config.schema import GuardOptions

    opt = torch.optim.AdamW(torch.nn.Linear(2, 1).parameters(), lr=1e-2)
    guards = GuardOptions(finite_guard=False, max_consecutive_skips=7, rollback_lr_factor=0.25, max_rollbacks=3,
                          skip_loss_spikes=5.0)
    guard = StepGuard.for_run(guards, opt, [lambda k: 1.0], 8, torch.device("cpu"), fused=False, interval=2,
                              world_size=1)
    assert (guard.enabled, guard.max_consecutive_skips, guard.rollback_lr_factor, guard.max_rollbacks,
            guard.spike_sigma, guard.interval, guard.fused) == (False, 7, 0.25, 3, 5.0, 2, False)


def test_device_skip_flags_read_the_guards_found_inf_on_the_device():
    """The device-side optimizers' shared interface: no flag keeps the step; found_inf 1 skips it; no host read."""
    from dit_lora.training.guard import DeviceSkip

    opt = DeviceSkip()
    keep, kept = opt.keep_flags(torch.device("cpu"))
    assert keep.dtype == torch.float64 and keep.item() == 1.0 and kept.item()
    opt.found_inf = torch.ones(1)
    keep, kept = opt.keep_flags(torch.device("cpu"))
    assert keep.shape == () and keep.item() == 0.0 and not kept.item()
    opt.found_inf = torch.zeros(())
    assert opt.keep_flags(torch.device("cpu"))[0].item() == 1.0
