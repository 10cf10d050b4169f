#!/usr/bin/env python
"""How far healthy fast ops are from the exact answer, and whether the kernel check ever flags one.

    python benchmarks/kernels/check_errors.py --trials 400 --out /tmp/errors.json      # CUDA: real kernels
    TRITON_INTERPRET=1 python benchmarks/kernels/check_errors.py --trials 60 --small  # CPU

For random trials (op, backend, dtype, shape, magnitude, mask, autocast, seed) it runs the kernel
check's own comparison (``dit_lora.kernels.tolerance.check_call``) and records, per compared tensor,
the fast path's and the reference's max error against the float64 reference. It prints, per op and
dtype, the largest ratio fast error / max(reference error, sensitivity), the largest fast error in units of
eps x max|exact|, and the number of healthy calls the check flagged (must be 0). It then runs the
broken variants (OpenDiT's sample mix-up, a NaN in attention, one wrong row) and counts how many the
check catches (every NaN and sample mix-up, and at least 90% of wrong rows: the rest hide in an
ill-conditioned softmax). These are the figures behind ``tolerance.ERROR_MULTIPLE`` and
``FLOOR_ULPS``; the results go to ``benchmarks/RESULTS.md``.
"""

from __future__ import annotations

import argparse
import json
import math
import random
import sys
from collections import defaultdict
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

import torch  # noqa: E402

from dit_lora.kernels.attention import attention, attention_reference, resolve_backend  # noqa: E402
from dit_lora.kernels.triton_launch import triton_usable  # noqa: E402
from dit_lora.kernels.tolerance import ERROR_MULTIPLE, FLOOR_ULPS, RELATIVE_FLOOR, check_call  # noqa: E402


def _ops(device: torch.device) -> dict:
    """name -> (fast, reference, builder(rng, dtype, small) -> args). Attention once per backend here."""
    from dit_lora.kernels.gated_residual import gated_residual, gated_residual_reference
    from dit_lora.kernels.linear_attention import relu_linear_attention, relu_linear_attention_reference
    from dit_lora.kernels.modulate import layernorm_modulate, layernorm_modulate_reference
    from dit_lora.kernels.rms_norm import rms_norm, rms_norm_reference

    ops = {}
    names = ("sdpa", "math") if device.type != "cuda" else ("flash", "cudnn", "efficient", "math")
    for name in names:
        backend = resolve_backend(name, device)
        ops[f"attention:{backend.name}"] = (
            lambda q, k, v, m, b=backend: attention(q, k, v, m, b), attention_reference, _attention_args)
    if triton_usable(device)[0]:
        ops.update({
            "modulate": (layernorm_modulate, layernorm_modulate_reference, _modulate_args(False)),
            "modulate_affine": (layernorm_modulate, layernorm_modulate_reference, _modulate_args(True)),
            "gated_residual": (gated_residual, gated_residual_reference, _gated_args),
            "rms_norm": (rms_norm, rms_norm_reference, _rms_args),
            "linear_attention": (relu_linear_attention, relu_linear_attention_reference, _linear_args),
        })
    return ops


def _randn(rng, shape, dtype, device, scale=1.0, offset=0.0):
    gen = torch.Generator(device="cpu").manual_seed(rng.randrange(2**31))
    return (torch.randn(*shape, generator=gen) * scale + offset).to(device=device, dtype=dtype)


def _magnitude(rng) -> float:
    return 10 ** rng.uniform(-2, 2)


def _attention_args(rng, dtype, device, small):
    b, h = rng.randint(1, 3), rng.randint(1, 3)
    n = rng.randint(1, 64 if small else 4096)
    m = rng.choice([n, rng.randint(1, 64 if small else 512)])  # self- or cross-attention
    d = rng.choice([16, 32, 64] if small else [64, 64, 128])
    mag = _magnitude(rng) ** 0.5  # logits scale with the square of the inputs' magnitude
    q, k, v = (_randn(rng, (b, h, length, d), dtype, device, mag) for length in (n, m, m))
    mask = None
    if m > 1 and rng.random() < 0.5:  # per-sample padding of the keys, as a caption mask
        valid = torch.tensor([rng.randint(1, m) for _ in range(b)], device=device)
        keep = torch.arange(m, device=device)[None, :] < valid[:, None]
        mask = keep[:, None, None, :] if rng.random() < 0.5 else torch.where(
            keep, 0.0, -10000.0)[:, None, None, :].to(dtype)
    return q, k, v, mask


def _modulate_args(affine):
    def build(rng, dtype, device, small):
        b, n, d = rng.randint(1, 3), rng.randint(1, 64 if small else 4096), rng.choice([37, 72, 130] if small else [1152, 1920, 3072])
        mag = _magnitude(rng)
        w = _randn(rng, (d,), dtype, device, 0.1, 1.0) if affine else None
        bias = _randn(rng, (d,), dtype, device, 0.1) if affine else None
        return (_randn(rng, (b, n, d), dtype, device, mag, mag * rng.uniform(-1, 1)), w, bias,
                _randn(rng, (b, d), dtype, device, 0.3), _randn(rng, (b, d), dtype, device, 0.3), 1e-5 if affine else 1e-6)
    return build


def _gated_args(rng, dtype, device, small):
    b, n, d = rng.randint(1, 3), rng.randint(1, 64 if small else 4096), rng.choice([37, 72] if small else [1152, 3072])
    mag = _magnitude(rng)
    return (_randn(rng, (b, n, d), dtype, device, mag), _randn(rng, (b, d), dtype, device),
            _randn(rng, (b, n, d), dtype, device, mag))


def _rms_args(rng, dtype, device, small):
    b, n, d = rng.randint(1, 3), rng.randint(1, 64 if small else 4096), rng.choice([37, 64] if small else [64, 2304])
    return _randn(rng, (b, n, d), dtype, device, _magnitude(rng)), _randn(rng, (d,), dtype, device, 0.1, 1.0), 1e-6


def _linear_args(rng, dtype, device, small):
    b, heads, dh = rng.randint(1, 3), rng.randint(1, 4), rng.choice([16, 32])
    n = rng.randint(1, 64 if small else 4096)
    mag = _magnitude(rng) ** 0.5
    return (*(_randn(rng, (b, n, heads * dh), dtype, device, mag) for _ in range(3)), heads)


def _broken(fast, kind):
    """A deliberately faulty version of ``fast`` (the drills the check must catch)."""
    def run(*args):
        args = list(args)
        if kind == "sample_mixup" and len(args) == 6 and args[3] is not None and args[3].shape[0] > 1:
            args[3], args[4] = args[3][:1].expand_as(args[3]), args[4][:1].expand_as(args[4])
        out = fast(*args)
        if kind == "nan":
            out = out.contiguous().clone()
            out.view(-1)[out.numel() // 2] = float("nan")
        if kind == "wrong_row" and out.dim() >= 3 and out.shape[-2] > 1:
            out = torch.cat([out[..., 1:2, :], out[..., 1:, :]], dim=-2)  # row 0 reads row 1
        return out
    return run


def _rows_differ(reference, inputs) -> bool:
    """Whether rows 0 and 1 of the op's answer differ by more than half its largest value."""
    with torch.no_grad():
        out = reference(*inputs).float()
    if out.dim() < 3 or out.shape[-2] < 2:
        return False
    return bool((out[..., 0, :] - out[..., 1, :]).abs().max() > 0.5 * out.abs().max())


def trial_stats(stats: list) -> dict:
    """Worst ratios of one trial: fast/reference error and fast error in eps x scale units."""
    def ratio(s):
        ref = max(s["reference_error"], s["sensitivity"])
        return s["fast_error"] / ref if ref > 0 else (0.0 if s["fast_error"] == 0 else math.inf)

    def ulps(s):
        scale = max(s["scale"], s["floor_scale"])
        return s["fast_error"] / (s["eps"] * scale) if scale > 0 else (0.0 if s["fast_error"] == 0 else math.inf)

    return {"ratio": max(map(ratio, stats)), "ulps": max(map(ulps, stats))}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--trials", type=int, default=200, help="Healthy trials per op and dtype.")
    ap.add_argument("--broken_trials", type=int, default=20, help="Trials per op and broken variant.")
    ap.add_argument("--small", action="store_true", help="Small shapes (CPU, Triton interpreter).")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--ops", default="", help="Comma-separated name prefixes (e.g. attention,modulate); default all.")
    ap.add_argument("--out", default=None, help="Write every trial's figures here (JSON).")
    args = ap.parse_args(argv)
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    rng = random.Random(args.seed)
    rows, records = defaultdict(lambda: {"trials": 0, "trips": 0, "inconclusive": 0, "ratio": 0.0, "ulps": 0.0}), []
    dtypes = (torch.float32, torch.bfloat16)
    prefixes = [p for p in args.ops.split(",") if p]
    ops = {n: op for n, op in _ops(device).items() if not prefixes or any(n.startswith(p) for p in prefixes)}
    for name, (fast, reference, build) in ops.items():
        for dtype in dtypes:
            for t in range(args.trials):
                inputs = build(rng, dtype, device, args.small)
                autocast = (device.type, dtype == torch.float32 and rng.random() < 0.3, torch.bfloat16)
                grads = tuple(isinstance(a, torch.Tensor) and a.is_floating_point() and a.dim() > 0
                              and not (name.startswith("attention") and i == 3) for i, a in enumerate(inputs))
                stats: list = []
                verdict = check_call(fast, reference, inputs, grads, autocast, seed=t, stats=stats)
                row = rows[(name, str(dtype).split(".")[-1])]
                row["trials"] += 1
                row["trips"] += bool(verdict) and verdict != "inconclusive"
                row["inconclusive"] += verdict == "inconclusive"
                figures = trial_stats(stats)
                row["ratio"], row["ulps"] = max(row["ratio"], figures["ratio"]), max(row["ulps"], figures["ulps"])
                records.append({"op": name, "dtype": str(dtype), "verdict": verdict, **figures,
                                "shapes": [list(a.shape) if isinstance(a, torch.Tensor) else a for a in inputs]})
                if verdict and verdict != "inconclusive":
                    print(f"FALSE TRIP {name} {dtype}: {verdict} shapes={records[-1]['shapes']}", flush=True)
    device_name = torch.cuda.get_device_name() if device.type == "cuda" else "CPU"
    print(f"\ndevice: {device_name}; torch {torch.__version__}; rule: error <= {ERROR_MULTIPLE} x reference error "
          f"+ max({FLOOR_ULPS} x eps, {RELATIVE_FLOOR:.3g}) x max|exact|")
    print("| op | dtype | trials | false trips | inconclusive | worst fast/ref error | worst error in eps x max |")
    print("|---|---|---|---|---|---|---|")
    for (name, dt), r in sorted(rows.items()):
        print(f"| {name} | {dt} | {r['trials']} | {r['trips']} | {r['inconclusive']} | {r['ratio']:.2f} | {r['ulps']:.2f} |")
    caught = defaultdict(lambda: [0, 0])
    for name, (fast, reference, build) in ops.items():
        kinds = ("nan", "wrong_row") + (("sample_mixup",) if name.startswith("modulate") else ())
        for kind in kinds:
            for t in range(args.broken_trials):
                dtype = dtypes[t % 2]
                inputs = build(rng, dtype, device, args.small)
                if kind == "sample_mixup" and inputs[0].shape[0] == 1:
                    inputs = build(rng, dtype, device, args.small)
                    if inputs[0].shape[0] == 1:
                        continue
                if kind == "wrong_row" and not _rows_differ(reference, inputs):
                    continue  # rows 0 and 1 of the answer (nearly) agree: reading the wrong one is harmless
                grads = tuple(isinstance(a, torch.Tensor) and a.is_floating_point() and a.dim() > 0
                              and not (name.startswith("attention") and i == 3) for i, a in enumerate(inputs))
                verdict = check_call(_broken(fast, kind), reference, inputs, grads, (device.type, False, torch.bfloat16), seed=t)
                caught[(name, kind)][0] += bool(verdict) and verdict != "inconclusive"
                caught[(name, kind)][1] += 1
    print("\n| op | broken variant | caught / trials |\n|---|---|---|")
    for (name, kind), (hit, n) in sorted(caught.items()):
        print(f"| {name} | {kind} | {hit} / {n} |")
    if args.out:
        Path(args.out).write_text(json.dumps({"device": device_name, "torch": torch.__version__, "records": records,
                                              "caught": {f"{k[0]}:{k[1]}": v for k, v in caught.items()}}, indent=1))
    trips = sum(r["trips"] for r in rows.values())
    missed = sum(n - hit for (_, kind), (hit, n) in caught.items() if kind != "wrong_row")
    # A wrong row can hide in an ill-conditioned softmax (logits in the hundreds, where one bf16 ulp
    # of the inputs moves the answer as much): most, not all, must be caught.
    rows_hit = sum(hit for (_, kind), (hit, n) in caught.items() if kind == "wrong_row")
    rows_n = sum(n for (_, kind), (hit, n) in caught.items() if kind == "wrong_row")
    print(f"\nfalse trips: {trips}; NaN / sample mix-up missed: {missed}; wrong rows caught: {rows_hit} / {rows_n}")
    return 1 if trips or missed or rows_hit < 0.9 * rows_n else 0


if __name__ == "__main__":
    sys.exit(main())
