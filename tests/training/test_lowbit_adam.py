"""dit_lora.training.lowbit_adam: torchao's 8-bit and 4-bit AdamW, bitwise step for step, with the guard's skip on the
device and no host read.

Each test compiles torchao's update once per parameter shape and dtype (inductor's C++ on a CPU: seconds each, cached
on disk for later runs); the parameters are few and small: a quantized pair (4,096 values: torchao quantizes from
there), a tensor it keeps unquantized, and one whose size is not a whole number of its blocks."""

from __future__ import annotations

import io

import pytest
import torch
from optimizer_state import gradients, same

pytest.importorskip("torchao")  # a dev dependency (pyproject's dev and quant extras)

from dit_lora.training.lowbit_adam import device_adamw, torchao_optimizers  # noqa: E402

_OPTIONS = {"lr": 1e-2, "betas": (0.8, 0.95), "eps": 1e-7, "weight_decay": 0.01}


#: where the tests run: on a CPU, and on CUDA where there is one (there the first update compiles Triton kernels under
#: torch.cuda's sync debug mode; not yet run on a GPU when written)
DEVICES = ["cpu", pytest.param("cuda", marks=pytest.mark.gpu)]


def _params(dtype=torch.float32, seed: int = 0, device: str = "cpu") -> list[torch.nn.Parameter]:
    g = torch.Generator().manual_seed(seed)
    # two quantized matrices (a LoRA's B starts at zero; one shape: one graph), a 1-D weight (a trained norm), and
    # 4,160 values: not whole blocks
    tensors = [torch.randn(16, 256, generator=g), torch.zeros(16, 256), torch.randn(9, generator=g),
               torch.randn(65, 64, generator=g)]
    return [torch.nn.Parameter(t.to(device, dtype)) for t in tensors]


def _torchao(bits: int, params, **options):
    eight, four = torchao_optimizers()
    return {8: eight, 4: four}[bits](params, **options)


def _give(params, step: int) -> None:
    for p, grad in zip(params, gradients(step, params)):
        p.grad = grad.to(p.device, p.dtype)


def _inner(state: dict) -> dict[str, torch.Tensor]:
    """torchao's state with each quantized moment as its inner tensors, named as ours."""
    out = {}
    for key, value in state.items():
        if type(value) is torch.Tensor:
            out[key] = value
        else:
            out.update({f"{key}.{name}": getattr(value, name) for name in ("codes", "scale", "qmap")})
    return out


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("bits,dtype", [(8, torch.float32), (4, torch.float32), (4, torch.bfloat16)])
@pytest.mark.parametrize("guarded", [False, True])
def test_every_step_is_torchaos_bit_for_bit(bits, dtype, guarded, device):
    """Ours (driven by the guard's flag 0, or without it) and torchao's own step, same gradients: parameters, codes,
    scales, lookup tables and counts are equal bit for bit after every step (the count: ours on the device, torchao's
    on the host)."""
    ours, theirs = _params(dtype, device=device), _params(dtype, device=device)
    mine, ref = device_adamw(bits, ours, **_OPTIONS), _torchao(bits, theirs, **_OPTIONS)
    for step in range(3):
        _give(ours, step)
        _give(theirs, step)
        mine.found_inf = torch.zeros((), device=device) if guarded else None
        mine.step()
        ref.step()
        assert all(torch.equal(p, q) for p, q in zip(ours, theirs)), step
        for p, q in zip(ours, theirs):
            theirs_state = _inner(ref.state[q])
            assert mine.state[p]["step"].device == p.device and theirs_state["step"].item() == step + 1
            theirs_state["step"] = theirs_state["step"].to(device)
            assert same(mine.state[p], theirs_state), step
    assert any(k.endswith(".codes") for k in mine.state[ours[0]]) and "exp_avg" in mine.state[ours[2]]
    assert "exp_avg" in mine.state[ours[3]]  # torchao keeps a size that is not whole blocks unquantized


@pytest.mark.parametrize("bits", [8, 4])
@pytest.mark.parametrize("skipped", [0, 2])
def test_a_skipped_step_changes_nothing_and_the_run_goes_on_as_without_it(bits, skipped):
    """Skipped at the first step (the state is made, empty of updates) or a later one, with NaN, Inf and finite
    gradients whose squares overflow: parameters, every inner tensor (codes, scales, tables) and the counts are what
    they were, and the steps after it equal a run that never had it, bit for bit."""
    ours, plain = _params(), _params()
    guarded, reference = device_adamw(bits, ours, **_OPTIONS), device_adamw(bits, plain, **_OPTIONS)
    for step in range(4):
        if step == skipped:
            before = ([p.detach().clone() for p in ours], _copy_state(guarded))
            for p, bad in zip(ours, (float("nan"), float("inf"), 3e38, -float("inf"))):
                p.grad = torch.full_like(p, bad)
            guarded.found_inf = torch.ones(())
            guarded.step()
            assert all(torch.equal(p, q) for p, q in zip(ours, before[0]))
            state = _copy_state(guarded)
            if skipped == 0:
                assert all(s["step"].item() == 0 for s in state)
            else:
                assert same(state, before[1])
        _give(ours, step)
        _give(plain, step)
        guarded.found_inf = reference.found_inf = torch.zeros(())
        guarded.step()
        reference.step()
    assert all(torch.equal(p, q) for p, q in zip(ours, plain))
    assert same(_copy_state(guarded), _copy_state(reference))
    assert {s["step"].item() for s in _copy_state(guarded)} == {4.0}


def _copy_state(opt) -> list[dict[str, torch.Tensor]]:
    return [{k: v.clone() for k, v in s.items()} for s in opt.state.values()]


@pytest.mark.parametrize("bits", [8, 4])
def test_its_state_round_trips_through_the_checkpoint_formats(bits):
    """The state is plain tensors: through torch.save and torch.load(weights_only=True) (accelerate's optimizer.bin),
    and through safetensors (the guard's snapshot), a new optimizer steps on as the saved one, bit for bit; codes
    stay uint8, scales fp32 (torch's load would cast them to the parameter's dtype)."""
    from safetensors.torch import load, save

    ours, other, third = _params(), _params(), _params()
    first = device_adamw(bits, ours, **_OPTIONS)
    for step in range(2):
        _give(ours, step)
        first.step()
    for params in (other, third):
        with torch.no_grad():
            for p, q in zip(params, ours):
                p.copy_(q)
    buffer = io.BytesIO()
    torch.save(first.state_dict(), buffer)
    buffer.seek(0)
    second = device_adamw(bits, other, **_OPTIONS)
    second.load_state_dict(torch.load(buffer, weights_only=True))
    flat = {f"{i}/{k}": v for i, s in first.state_dict()["state"].items() for k, v in s.items()}
    third_opt = device_adamw(bits, third, **_OPTIONS)
    read = load(save(flat))
    state = {i: {k: read[f"{i}/{k}"] for k in s} for i, s in first.state_dict()["state"].items()}
    third_opt.load_state_dict({"state": state, "param_groups": first.state_dict()["param_groups"]})
    assert second.state[other[0]]["exp_avg.codes"].dtype == torch.uint8
    assert second.state[other[0]]["exp_avg.scale"].dtype == torch.float32
    for opt, params in ((first, ours), (second, other), (third_opt, third)):
        _give(params, 5)
        opt.found_inf = torch.zeros(())
        opt.step()
    for params in (other, third):
        assert all(torch.equal(p, q) for p, q in zip(ours, params))


@pytest.mark.parametrize("bits", [8, 4])
def test_the_plan_counts_the_state_it_keeps(bits):
    """config/optimizer_state.lowbit_adam_state_bytes is the bytes of the tensors the optimizer keeps after a step."""
    from dit_lora.config.optimizer_state import lowbit_adam_state_bytes

    params = _params()
    opt = device_adamw(bits, params, **_OPTIONS)
    _give(params, 0)
    opt.step()
    kept = sum(v.numel() * v.element_size() for s in opt.state.values() for v in s.values())
    assert lowbit_adam_state_bytes([p.numel() for p in params], bits=bits) == kept


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("bits", [8, 4])
def test_the_guard_drives_it_on_the_device_without_a_host_read(bits, device):
    """Under the host-sync audit (on CUDA with torch.cuda's sync debug mode, the first update's compile included),
    StepGuard steps it with its device learning rate (the group's tensor, which torchao's update reads) and skips a
    NaN loss's step: nothing moves, nothing syncs, the schedule waits."""
    from dit_lora.training.guard import StepGuard
    from dit_lora.training.sync_audit import SyncAudit

    params = _params(device=device)
    opt = device_adamw(bits, params, **_OPTIONS)
    guard = StepGuard(opt, [lambda k: 1.0 / (k + 1)], 8, torch.device(device), enabled=True, fused=True, interval=4,
                      max_consecutive_skips=3, rollback_lr_factor=0.5, max_rollbacks=1, spike_sigma=None,
                      world_size=1)
    audit = SyncAudit(torch.device(device), enabled=True)
    seen = []
    for step, bad in enumerate((False, True, False)):
        _give(params, step)
        before = [p.detach().clone() for p in params], _copy_state(opt)
        loss = torch.tensor(float("nan") if bad else 1.0, device=device)
        norm = torch.nn.utils.get_total_norm([p.grad for p in params])
        with audit.step():
            guard.step(opt, opt, loss, norm, step)
        moved = not all(torch.equal(p, q) for p, q in zip(params, before[0]))
        assert moved != bad and (bad == same(_copy_state(opt), before[1]))
        seen.append(opt.param_groups[0]["lr"].item())
    assert audit.compiled == 3 * len(params) and not audit.passed
    assert seen == pytest.approx([0.005, 0.005, 1e-2 / 3])  # the second update's rate waited through the skipped step


def test_the_guards_snapshot_holds_it_through_safetensors_and_a_rollback_restores_it():
    """The guard snapshots the state (codes, scales, tables, counts) with the weights, writes it to a checkpoint's
    safetensors file and reads it back; a rollback to it restores every tensor, in its own dtype."""
    from safetensors.torch import load, save

    from dit_lora.training.guard import StepGuard

    model = torch.nn.ParameterList(_params())
    opt = device_adamw(8, model.parameters(), **_OPTIONS)
    guard = StepGuard(opt, [lambda k: 1.0], 8, torch.device("cpu"), enabled=True, fused=True, interval=2,
                      max_consecutive_skips=2, rollback_lr_factor=1.0, max_rollbacks=1, spike_sigma=None,
                      world_size=1)
    _give(list(model.parameters()), 0)
    opt.step()
    guard.take_snapshot(model, 1)
    saved = [p.detach().clone() for p in model.parameters()], _copy_state(opt)
    restored = StepGuard(opt, [lambda k: 1.0], 8, torch.device("cpu"), enabled=True, fused=True, interval=2,
                         max_consecutive_skips=2, rollback_lr_factor=1.0, max_rollbacks=1, spike_sigma=None,
                         world_size=1)
    restored.load_snapshot_tensors(model, load(save(guard.snapshot_tensors(model))))
    for step in (1, 2):
        _give(list(model.parameters()), step)
        opt.step()
    restored.roll_back(model, 3)
    assert all(torch.equal(p, q) for p, q in zip(model.parameters(), saved[0]))
    assert same(_copy_state(opt), saved[1])
    assert opt.state[model[0]]["exp_avg.codes"].dtype == torch.uint8
