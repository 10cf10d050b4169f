"""When does a fast op disagree with its reference? A tolerance derived from the precision involved.

Two correct implementations of the same op differ by rounding, and by how much depends on the
compute dtype, the reduction lengths, how much the result cancels (an attention gradient is a sum
of terms that add up to nearly zero) and how sensitive the op is to its inputs (a softmax over
large logits). A fixed relative tolerance therefore flags healthy kernels (a 5.6e-8 difference
between two fp32 attentions did) or misses broken ones. The check compares against the exact
answer instead, and asks how far a correct implementation could be from it:

    exact          = the reference in float64 on the same (already rounded) inputs
    err(fast)      = max |fast - exact|
    err(reference) = max |reference at the compute dtype - exact|
    sensitivity    = max |exact on inputs moved by PERTURB_ULPS ulps - exact|, and for gradients
                     also the exact backward of a cotangent moved by eps(compute dtype), which is
                     what rounding a backward's intermediates (attention's dS) to that dtype does

    faulty when err(fast) > ERROR_MULTIPLE * max(err(reference), sensitivity)
                            + max(FLOOR_ULPS * eps(compute dtype), RELATIVE_FLOOR) * floor scale

where the floor scale is the largest exact value among the call's tensors of the same kind (see
:func:`_judge_all`). A healthy kernel rounds differently but not an order of magnitude worse; a
kernel that mixes samples, reads a wrong row or drops a term is off by a sizeable fraction of the
values themselves. ``benchmarks/kernels/check_errors.py`` measures both sides (false trips over
random shapes, magnitudes and masks; broken variants caught) on each device; the figures are in
``benchmarks/RESULTS.md``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

# How much worse than the reference's own rounding a fast path may be. Measured healthy ratios
# (fast error / reference error, max over many trials) are recorded in benchmarks/RESULTS.md.
ERROR_MULTIPLE = 4.0
# An absolute floor in units of the compute dtype's epsilon times the largest exact value: covers
# a reference that happens to be exact (err(reference) = 0) while the fast path rounds once.
FLOOR_ULPS = 2.0
# No check asks two implementations to agree beyond this fraction of the largest value: in fp32,
# rounding residues of terms that cancel exactly in float64 reach ~1e-6 of it, while a wrong row, a
# mixed-up sample or a dropped term is off by a sizeable fraction of the values themselves.
RELATIVE_FLOOR = 2.0**-12
# Relative size of the input perturbation (in ulps of the compute dtype) that measures an op's
# conditioning, e.g. a softmax over large logits: a correct kernel may round what it handles to
# the compute dtype, so its answer is the exact answer on inputs moved by about this much.
PERTURB_ULPS = 1.0


def compute_eps(*dtypes: torch.dtype | None) -> float:
    """Machine epsilon of the least precise floating dtype among ``dtypes`` (None entries ignored)."""
    eps = [torch.finfo(d).eps for d in dtypes if d is not None and d.is_floating_point]
    return max(eps) if eps else torch.finfo(torch.float32).eps


def exact_inputs(args: tuple, grads: tuple[bool, ...], perturb: int | None = None, eps: float = 0.0) -> list:
    """``args`` with every floating tensor upcast to float64 (fresh leaves where ``grads`` asks).

    With ``perturb`` (a seed), each value is also moved by a random relative amount of up to
    ``PERTURB_ULPS * eps``: the exact reference on such inputs shows how far rounding at that
    precision inside a kernel (of the inputs, or of what it computes from them, such as attention
    logits) can move this op's result on these values (its conditioning).
    """
    out: list[Any] = []
    for a, grad in zip(args, grads):
        if isinstance(a, torch.Tensor) and a.is_floating_point():
            a = a.detach().to(torch.float64)
            if perturb is not None:
                gen = torch.Generator(device=a.device).manual_seed(perturb + len(out))
                noise = torch.rand(a.shape, generator=gen, device=a.device, dtype=torch.float64) * 2 - 1
                a = a * (1 + noise * PERTURB_ULPS * eps)
            a = a.requires_grad_(grad)
        elif isinstance(a, torch.Tensor):
            a = a.detach().clone()
        out.append(a)
    return out


def allowed_error(reference_error: float, sensitivity: float, floor_scale: float, eps: float) -> float:
    """The largest ``max |fast - exact|`` a healthy fast path may show (see the module docstring)."""
    return ERROR_MULTIPLE * max(reference_error, sensitivity) + max(FLOOR_ULPS * eps, RELATIVE_FLOOR) * floor_scale


def error_stats(
    fast: torch.Tensor, reference: torch.Tensor, exact: torch.Tensor, perturbed: torch.Tensor
) -> dict[str, float]:
    """The figures :func:`judge` works from: max errors against ``exact``, and ``exact``'s largest value.

    Non-finite entries of the reference and the perturbed run are left out of their errors (inf if
    none is finite); a non-finite fast entry makes ``fast_error`` inf.
    """
    exact = exact.detach().double()

    def err(t: torch.Tensor, finite_only: bool, rms: bool = False) -> float:
        d = (t.detach().double() - exact).abs()
        if finite_only:
            d = d[torch.isfinite(d)] if bool(torch.isfinite(d).any()) else torch.full((1,), float("inf"))
        if not d.numel():
            return 0.0
        return float(d.pow(2).mean().sqrt()) if rms else float(d.max())

    empty = exact.numel() == 0
    return {
        "fast_error": err(fast, False),
        "reference_error": err(reference, True),
        "sensitivity": err(perturbed, True),
        "scale": 0.0 if empty else float(exact.abs().max()),
        "fast_rms": err(fast, False, True),
        "reference_rms": err(reference, True, True),
        "sensitivity_rms": err(perturbed, True, True),
        "scale_rms": 0.0 if empty else float(exact.pow(2).mean().sqrt()),
    }


def judge(
    what: str,
    fast: torch.Tensor,
    reference: torch.Tensor,
    exact: torch.Tensor,
    perturbed: torch.Tensor,
    eps: float,
    floor_scale: tuple[float, float] | None = None,
) -> str | None:
    """None when ``fast`` is as accurate as a correct implementation at ``eps``; a reason otherwise.

    ``reference`` is the PyTorch reference at the compute dtype, ``exact`` the same in float64,
    ``perturbed`` the float64 reference on perturbed inputs. ``floor_scale`` = (largest, rms) sizes
    the absolute floors (default: ``exact``'s own). 'inconclusive' when even the float64 reference is not
    finite (nothing to compare against). Reads values on the host: call only on check steps.
    """
    exact = exact.detach()
    if not bool(torch.isfinite(exact).all()):
        return "inconclusive"
    fast_bad = ~torch.isfinite(fast)
    if bool(fast_bad.any()):
        # Non-finite where the reference at the same precision is finite: the kernel's fault. Where
        # the reference overflows too, the precision is at fault, not the kernel.
        bad = int((fast_bad & torch.isfinite(reference)).sum())
        return f"returned {bad} non-finite value(s) in its {what} where the reference is finite" if bad else None
    if exact.numel() == 0:
        return None
    s = error_stats(fast, reference, exact, perturbed)
    floor_max, floor_rms = floor_scale if floor_scale else (0.0, 0.0)
    # The largest error catches a fault in a few values (a wrong row); the root-mean-square one a
    # fault spread thinly over many (a sample modulated with another sample's scale).
    for kind, err, ref, sens, scale in (
        ("max", s["fast_error"], s["reference_error"], s["sensitivity"], max(s["scale"], floor_max)),
        ("rms", s["fast_rms"], s["reference_rms"], s["sensitivity_rms"], max(s["scale_rms"], floor_rms)),
    ):
        limit = allowed_error(ref, sens, scale, eps)
        if err > limit:
            return (
                f"disagreed with the float64 reference in its {what}: {kind} |error| {err:.3g}, while the "
                f"reference at the same precision is off by {ref:.3g} (allowed {limit:.3g})"
            )
    return None


def _run(fn: Callable, inputs: list, autocast: tuple[str, bool, torch.dtype]) -> torch.Tensor:
    device_type, enabled, dtype = autocast
    with torch.enable_grad(), torch.autocast(device_type, dtype=dtype, enabled=enabled):
        return fn(*inputs)


def _leaves(args: tuple, grads: tuple[bool, ...]) -> list:
    return [
        a.detach().clone().requires_grad_(grad) if isinstance(a, torch.Tensor) else a for a, grad in zip(args, grads)
    ]


def check_call(
    fast: Callable,
    reference: Callable,
    args: tuple,
    needs_grad: tuple[bool, ...],
    autocast: tuple[str, bool, torch.dtype],
    seed: int = 0,
    stats: list | None = None,
) -> str:
    """Check one call of a fast op: '' when it agrees, 'inconclusive', or the reason it does not.

    Runs on ``args``: the fast path and the reference at the run's precision (under the captured
    ``autocast`` = (device type, enabled, dtype)), the reference in float64 as the exact answer, and
    the float64 reference on perturbed inputs (and, for gradients, a perturbed cotangent) for the
    op's sensitivity. :func:`judge` compares the output, then the gradient of every input in
    ``needs_grad``, forward and backward with one random cotangent drawn from ``seed``. With
    ``stats`` (a list), the raw :func:`error_stats` of each compared tensor are appended to it.
    """
    in_f, in_r, in_x = _leaves(args, needs_grad), _leaves(args, needs_grad), exact_inputs(args, needs_grad)
    exact = (autocast[0], False, autocast[2])
    outs = [_run(fast, in_f, autocast), _run(reference, in_r, autocast), _run(reference, in_x, exact)]
    eps = compute_eps(outs[0].dtype, outs[1].dtype, autocast[2] if autocast[1] else None)
    in_p = exact_inputs(args, needs_grad, perturb=seed, eps=eps)
    outs.append(_run(reference, in_p, exact))
    verdict = _judge_all([("output", *outs)], eps, stats)
    if verdict or not outs[1].requires_grad:
        return verdict
    if not outs[0].requires_grad:
        return "returned an output without a gradient path"
    gen = torch.Generator(device=outs[2].device).manual_seed(seed)
    cotangent = torch.randn(outs[2].shape, generator=gen, device=outs[2].device, dtype=torch.float32)
    wrt = [i for i, a in enumerate(in_r) if isinstance(a, torch.Tensor) and a.requires_grad]
    grads = [
        torch.autograd.grad(
            out, [ins[i] for i in wrt], cotangent.to(out.dtype), allow_unused=True, retain_graph=out is outs[2]
        )
        for out, ins in zip(outs, (in_f, in_r, in_x, in_p))
    ]
    # A kernel that keeps its backward intermediates (softmax probabilities, their gradient) at the
    # compute dtype rounds them by up to eps: the exact backward of a cotangent moved by that much
    # shows how far such rounding can move each gradient, cancellation included.
    jitter = torch.rand(cotangent.shape, generator=gen, device=cotangent.device, dtype=torch.float64) * 2 - 1
    moved = torch.autograd.grad(
        outs[2], [in_x[i] for i in wrt], cotangent.double() * (1 + jitter * eps), allow_unused=True
    )
    pairs = [
        (f"gradient of input {i}", _or_zeros(gf, gx), _or_zeros(gr, gx), gx, _farther(gp, gm, gx))
        for i, gf, gr, gx, gp, gm in zip(wrt, *grads, moved)
        if gx is not None
    ]
    return _judge_all(pairs, eps, stats)


def _farther(a: torch.Tensor | None, b: torch.Tensor | None, exact: torch.Tensor) -> torch.Tensor:
    """Of two perturbed answers, the one farther from ``exact`` (the larger sensitivity)."""
    a, b = _or_zeros(a, exact), _or_zeros(b, exact)
    return a if float((a - exact).abs().max()) >= float((b - exact).abs().max()) else b


def _or_zeros(t: torch.Tensor | None, like: torch.Tensor) -> torch.Tensor:
    return t if t is not None else torch.zeros_like(like)


def _judge_all(pairs: list, eps: float, stats: list | None) -> str:
    """Judge each (what, fast, reference, exact, perturbed); tensors of one kind share a floor scale.

    A gradient can be exactly zero where a kernel's rounding leaves a tiny residue (softmax over one
    valid key: the terms cancel exactly in float64, not in fp32). Sizing the floor by the largest
    tensor of the same kind in the call (same rank and last dimension: q, k and v's gradients, not a
    LayerNorm's weight gradient beside its input's) keeps such residues from tripping it.
    """

    def kind(t: torch.Tensor) -> tuple:
        return (t.dim(), t.shape[-1] if t.dim() else 0)

    floors: dict[tuple, tuple[float, float]] = {}
    for _, _, _, exact, _ in pairs:
        if bool(torch.isfinite(exact).all()) and exact.numel():
            e = exact.detach().double()
            old = floors.get(kind(exact), (0.0, 0.0))
            floors[kind(exact)] = (max(old[0], float(e.abs().max())), max(old[1], float(e.pow(2).mean().sqrt())))
    inconclusive = False
    for what, fast, reference, exact, perturbed in pairs:
        if stats is not None:
            stats.append(
                {
                    "what": what,
                    "eps": eps,
                    "floor_scale": floors.get(kind(exact), (0.0, 0.0))[0],
                    **error_stats(fast, reference, exact, perturbed),
                }
            )
        verdict = judge(what, fast, reference, exact, perturbed, eps, floors.get(kind(exact)))
        if verdict == "inconclusive":
            inconclusive = True
        elif verdict is not None:
            return verdict
    return "inconclusive" if inconclusive else ""
