"""What the device-side optimizers' tests (tests/training/test_prodigy.py, test_adafactor.py) compare: an optimizer's
parameters and state at one moment, and exact equality of nested tensors."""

from __future__ import annotations

import copy

import torch


def snapshot(opt: torch.optim.Optimizer, params) -> tuple[list[torch.Tensor], dict]:
    """Copies of ``params`` and of ``opt``'s state dict (groups included)."""
    return copy.deepcopy([p.detach().clone() for p in params]), copy.deepcopy(opt.state_dict())


def same(a, b) -> bool:
    """Exact equality of tensors, dicts, lists and tuples of them, and plain values (NaN never equal)."""
    if isinstance(a, torch.Tensor):
        return torch.equal(a, b)
    if isinstance(a, dict):
        return a.keys() == b.keys() and all(same(a[k], b[k]) for k in a)
    if isinstance(a, (list, tuple)):
        return len(a) == len(b) and all(same(x, y) for x, y in zip(a, b))
    return a == b


def gradients(step: int, params) -> list[torch.Tensor]:
    """Seeded random gradients for ``params`` at ``step``, larger each step."""
    g = torch.Generator().manual_seed(100 + step)
    return [torch.randn(p.shape, generator=g) * (1 + step) for p in params]


def in_lockstep(ours, theirs, optimizers, steps: int):
    """``steps`` updates of every optimizer in ``optimizers`` (ours first, the reference second), both parameter lists
    given the same gradients each step; yields the step after the updates."""
    for step in range(steps):
        for p, q, grad in zip(ours, theirs, gradients(step, ours)):
            p.grad, q.grad = grad.clone(), grad.clone()
        for optimizer in optimizers:
            optimizer.step()
        yield step


def kept_step(step: int, guarded, ours, reference, plain) -> None:
    """One update of ``reference`` (over ``plain``) and of ``guarded`` (over ``ours``, the guard's flag 0: kept),
    each given ``step``'s gradients."""
    for params in (plain, ours):
        for p, grad in zip(params, gradients(step, params)):
            p.grad = grad
    reference.step()
    guarded.found_inf = torch.zeros(())
    guarded.step()


def resumed_pair(make, make_params, steps: int = 2):
    """An optimizer (``make(params)``) stepped ``steps`` times and a second one over a copy of its parameters with
    its state dict loaded, as a resume builds it; both then take one more step with the same gradients. Returns
    ``(first, ours, second, other)`` for the caller to compare (parameters and state)."""
    import copy

    ours, other = make_params(), make_params()
    first = make(ours)
    for step in range(steps):
        for p, grad in zip(ours, gradients(step, ours)):
            p.grad = grad
        first.step()
    with torch.no_grad():
        for p, q in zip(other, ours):
            p.copy_(q)
    second = make(other)
    second.load_state_dict(copy.deepcopy(first.state_dict()))
    for opt, params in ((first, ours), (second, other)):
        for p, grad in zip(params, gradients(5, params)):
            p.grad = grad
        opt.step()
    return first, ours, second, other
