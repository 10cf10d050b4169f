"""kernels/tolerance.py: the precision-derived tolerance that judges a fast op against its float64 reference.

Plain PyTorch functions stand in for kernels: a re-associated but correct one passes, one that mixes samples, drops
a term or breaks its backward fails, with the reason.
"""

from __future__ import annotations

import math

import torch

from dit_lora.kernels.tolerance import (
    ERROR_MULTIPLE,
    FLOOR_ULPS,
    RELATIVE_FLOOR,
    allowed_error,
    check_call,
    compute_eps,
    error_stats,
    exact_inputs,
    judge,
)

FP32 = ("cpu", False, torch.float32)


def softmax_rows(x):
    return torch.softmax(x, dim=-1)


def softmax_by_hand(x):
    """Correct, rounded differently: exp of the shifted logits over their sum."""
    e = (x - x.amax(-1, keepdim=True)).exp()
    return e / e.sum(-1, keepdim=True)


def test_eps_and_allowed_error():
    assert compute_eps(torch.float32, None) == torch.finfo(torch.float32).eps
    assert compute_eps(torch.float32, torch.bfloat16, torch.int64) == torch.finfo(torch.bfloat16).eps
    assert compute_eps() == torch.finfo(torch.float32).eps
    eps = torch.finfo(torch.float32).eps
    assert allowed_error(1e-6, 2e-6, 10.0, eps) == ERROR_MULTIPLE * 2e-6 + max(FLOOR_ULPS * eps, RELATIVE_FLOOR) * 10


def test_exact_inputs_upcast_and_perturb_by_at_most_an_ulp():
    x, idx = torch.randn(4, 3), torch.arange(3)
    exact, same = exact_inputs((x, idx), (True, False))
    assert exact.dtype == torch.float64 and exact.requires_grad and exact.is_leaf and torch.equal(same, idx)
    eps = 1e-3
    moved = exact_inputs((x,), (False,), perturb=7, eps=eps)[0]
    relative = ((moved - x.double()) / x.double()).abs()
    assert 0 < relative.max() <= eps
    assert torch.equal(moved, exact_inputs((x,), (False,), perturb=7, eps=eps)[0])  # seeded


def test_error_stats_and_judge():
    exact = torch.tensor([1.0, -2.0, 4.0], dtype=torch.float64)
    near = exact.float() + 1e-7
    stats = error_stats(near, exact.float(), exact, exact)
    assert stats["scale"] == 4.0 and stats["reference_error"] == 0.0 and math.isclose(stats["fast_error"], 1e-7,
                                                                                       rel_tol=0.2)
    eps = torch.finfo(torch.float32).eps
    assert judge("output", near, exact.float(), exact, exact, eps) is None
    far = exact.float() * 1.1
    assert "max |error|" in judge("output", far, exact.float(), exact, exact, eps)
    nan = torch.tensor([float("nan"), 1.0, 1.0])
    assert judge("output", nan, exact.float(), exact, exact, eps).startswith("returned 1 non-finite value(s)")
    assert judge("output", nan, nan, exact, exact, eps) is None  # the precision overflows, not the kernel
    assert judge("output", near, near, exact * float("inf"), exact, eps) == "inconclusive"


def test_a_correct_reassociation_passes_forward_and_backward():
    torch.manual_seed(0)
    x = torch.randn(3, 17) * 4
    stats: list = []
    assert check_call(softmax_by_hand, softmax_rows, (x,), (True,), FP32, stats=stats) == ""
    assert [s["what"] for s in stats] == ["output", "gradient of input 0"]


def test_a_kernel_mixing_samples_or_dropping_a_term_fails():
    torch.manual_seed(1)
    x = torch.randn(3, 17)

    def first_row_for_all(x):
        return softmax_rows(x[:1]).expand_as(x) * 1.0

    def dropped_term(x):
        e = x.exp()
        return e / e[..., :-1].sum(-1, keepdim=True)

    assert "disagreed with the float64 reference in its output" in check_call(first_row_for_all, softmax_rows, (x,),
                                                                              (True,), FP32)
    assert "in its output" in check_call(dropped_term, softmax_rows, (x,), (True,), FP32)


def test_a_wrong_backward_is_caught_and_a_missing_one_is_named():
    class BadGrad(torch.autograd.Function):
        @staticmethod
        def forward(ctx, x):
            return x * 2

        @staticmethod
        def backward(ctx, g):
            return g * 3

    x = torch.randn(4, 5)
    assert "gradient of input 0" in check_call(BadGrad.apply, lambda t: t * 2, (x,), (True,), FP32)
    assert check_call(lambda t: (t * 2).detach(), lambda t: t * 2, (x,), (True,), FP32) == \
        "returned an output without a gradient path"
