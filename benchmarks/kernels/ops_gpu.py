#!/usr/bin/env python
"""Fused kernels vs eager vs ``torch.compile``, and softmax attention backends, on a CUDA GPU.

    python benchmarks/kernels/ops_gpu.py --out benchmarks/kernels/ops_gpu.json --markdown /tmp/kernels.md
    python benchmarks/kernels/ops_gpu.py --ops rms_norm --hidden 1152,3072 --tokens 16384 --attention none
    python benchmarks/kernels/ops_gpu.py --smoke     # CPU + Triton interpreter, tiny shapes: checks the script only

Fused ops (``dit_lora.kernels``), bf16, batch 1, every input and weight requiring grad: ``modulate``
(LayerNorm + adaLN scale/shift, no affine: Sana/DiT), ``modulate_affine`` (LN weight and bias too:
CogVideoX), ``gated_residual``, ``rms_norm`` (with weight), ``linear_attention`` (Sana's ReLU linear
attention, heads = D/32), at hidden D x tokens N, each three ways: the Triton kernel, the eager
``*_reference`` and ``torch.compile(reference, dynamic=False)`` (compiled afresh per shape; the first
call, compile included, is reported as ``first_call_s`` and never timed). Softmax attention: every
``--attention_backend`` that resolves to something distinct on CUDA, plus each installed flash-attn
package, at head dim 64: the CogVideoX shape (17,776 tokens, 48 / 30 heads) and 16,384 tokens (the
FlashAttention-3 paper's figures); TFLOP/s count the backward as 2.5x the forward's FLOPs.

Timing: CUDA events around each call, grads set to None before each, ``--warmup`` untimed calls, median
of ``--repeats``. A short ``torch.cuda._sleep`` is queued before each timed call so the host runs ahead
and the events bracket device time, not Python launch overhead (what a GPU-bound training step sees).

Then one decision per ``MEASURED_DEFAULTS`` key, printed as a snippet for ``dit_lora/kernels/defaults.py``
(never edited here): Triton if its forward+backward speedup over eager has a median >= 1.5x over the
measured shapes and no shape is slower than eager (or fails where eager ran); otherwise whichever of
eager and compiled is faster by median. Without CUDA (and without ``--smoke``) it exits with status 2.
"""

from __future__ import annotations

import argparse
import gc
import importlib
import json
import os
import statistics
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

from benchmarks.common.gpu_step import device_line, env_info, no_cuda_message  # noqa: E402

HIDDEN = (1152, 1920, 2240, 3072)  # Sana 600M, CogVideoX 2B, Sana 1.6B, CogVideoX 5B
TOKENS = (1024, 16384, 65536)
COGVIDEOX_TOKENS = 13 * 30 * 45 + 226  # 49 x 480 x 720 -> 13 x 30 x 45 patches, + 226 text tokens
ATTN_TOKENS = (COGVIDEOX_TOKENS, 16384)
ATTN_HEADS = (48, 30)  # CogVideoX 5B, 2B
HEAD_DIM = 64
BWD_FLOPS = 2.5  # backward = 2.5 x forward FLOPs (FlashAttention's convention)
OPS = ("modulate", "modulate_affine", "gated_residual", "rms_norm", "linear_attention")
IMPLS = ("triton", "eager", "compiled")
SMOKE = {"hidden": 40, "tokens": 24, "batch": 2, "heads": 2, "head_dim": 16}
SMOKE_COMPILED_OP = "gated_residual"  # CPU inductor takes ~12 s per function: exercise the path once
SLEEP_CYCLES = 1_000_000  # ~0.5 ms of GPU spin; the backlog grows each call, so the host stays ahead


def op_table(torch) -> dict:
    """op -> (MEASURED_DEFAULTS key, Triton fn, reference fn, builder(b, n, d, device, dtype) -> args)."""
    # Imported here, not at the top: TRITON_INTERPRET must be settled before the kernels are decorated.
    from dit_lora.kernels.gated_residual import gated_residual, gated_residual_reference
    from dit_lora.kernels.linear_attention import relu_linear_attention, relu_linear_attention_reference
    from dit_lora.kernels.modulate import layernorm_modulate, layernorm_modulate_reference
    from dit_lora.kernels.rms_norm import rms_norm, rms_norm_reference

    def leaf(dev, dt, *shape, scale=1.0, offset=0.0):
        return (torch.randn(*shape, device=dev) * scale + offset).to(dt).requires_grad_()

    def modulate(affine):
        def make(b, n, d, dev, dt):
            w = leaf(dev, dt, d, scale=0.1, offset=1.0) if affine else None
            bias = leaf(dev, dt, d, scale=0.1) if affine else None
            return (leaf(dev, dt, b, n, d), w, bias, leaf(dev, dt, b, d, scale=0.1), leaf(dev, dt, b, d, scale=0.1),
                    1e-5 if affine else 1e-6)  # CogVideoX's norm_eps, Sana's
        return make

    def gated(b, n, d, dev, dt):  # residual, gate, y
        return leaf(dev, dt, b, n, d), leaf(dev, dt, b, d), leaf(dev, dt, b, n, d)

    def rms(b, n, d, dev, dt):
        return leaf(dev, dt, b, n, d), leaf(dev, dt, d, scale=0.1, offset=1.0), 1e-6

    def qkv(b, n, d, dev, dt):  # Sana: head dim 32
        return leaf(dev, dt, b, n, d), leaf(dev, dt, b, n, d), leaf(dev, dt, b, n, d), d // 32

    return {
        "modulate": ("modulate", layernorm_modulate, layernorm_modulate_reference, modulate(False)),
        "modulate_affine": ("modulate", layernorm_modulate, layernorm_modulate_reference, modulate(True)),
        "gated_residual": ("gated_residual", gated_residual, gated_residual_reference, gated),
        "rms_norm": ("rmsnorm", rms_norm, rms_norm_reference, rms),
        "linear_attention": ("linear_attention", relu_linear_attention, relu_linear_attention_reference, qkv),
    }


def leaves_of(args, torch) -> list:
    """The tensors of ``args`` that get gradients (their .grad is reset between calls)."""
    return [a for a in args if isinstance(a, torch.Tensor) and a.requires_grad]


def timed_ms(fn, leaves, cfg, torch) -> float:
    """Median milliseconds of ``fn()`` over ``cfg.repeats`` calls after ``cfg.warmup`` untimed ones."""
    events, times = [], []
    for i in range(cfg.warmup + cfg.repeats):
        for t in leaves:  # as zero_grad(set_to_none=True): backward allocates fresh grads each call
            t.grad = None
        if i < cfg.warmup:
            fn()
        elif cfg.cuda:
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            torch.cuda._sleep(SLEEP_CYCLES)
            start.record()
            fn()
            end.record()
            events.append((start, end))
        else:
            t0 = time.perf_counter()
            fn()
            times.append((time.perf_counter() - t0) * 1e3)
    if cfg.cuda:
        torch.cuda.synchronize()
    return statistics.median(times + [s.elapsed_time(e) for s, e in events])


def measure(call, leaves, grad_out, cfg, torch) -> dict:
    """First call (compile/JIT included), then timed forward+backward and forward alone (grad enabled)."""
    def fwd_bwd():
        call().backward(grad_out)

    t0 = time.perf_counter()
    fwd_bwd()
    if cfg.cuda:
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
    res = {"status": "ok", "first_call_s": round(time.perf_counter() - t0, 3)}
    res["fwd_bwd_ms"] = round(timed_ms(fwd_bwd, leaves, cfg, torch), 4)
    if cfg.cuda:
        res["peak_mib"] = round(torch.cuda.max_memory_allocated() / 2**20)  # inputs included
    res["fwd_ms"] = round(timed_ms(call, leaves, cfg, torch), 4)
    return res


def failure(err, torch) -> dict:
    """A row entry for an implementation or backend that could not run: OOM or the error's first line."""
    text = (str(err).strip().splitlines() or [""])[0][:300]
    if isinstance(err, torch.cuda.OutOfMemoryError):
        return {"status": "oom", "error": text}
    return {"status": "error", "error": f"{type(err).__name__}: {text}"}


def release(torch, cuda: bool) -> None:
    gc.collect()
    if cuda:
        torch.cuda.empty_cache()


def run_op(name, spec, b, n, d, cfg, torch) -> dict:
    """One op at one shape: every implementation on fresh, identically seeded inputs."""
    key, triton_fn, ref_fn, make = spec
    row = {"kind": "op", "op": name, "key": key, "batch": b, "tokens": n, "hidden": d, "impls": {}}
    for impl in cfg.impls:
        if impl == "compiled" and cfg.smoke and name != SMOKE_COMPILED_OP:
            row["impls"][impl] = {"status": "skipped", "error": "smoke: compiled for one op only"}
            continue
        args = None
        try:
            torch.manual_seed(0)
            args = make(b, n, d, cfg.device, cfg.dtype)
            fn = {"triton": triton_fn, "eager": ref_fn}.get(impl)
            if impl == "compiled":
                torch._dynamo.reset()  # fresh compile per shape: honest compile time, no recompile limit
                fn = torch.compile(ref_fn, dynamic=False)
            grad_out = torch.randn_like(args[0])  # every op's output has its first input's shape
            row["impls"][impl] = measure(lambda: fn(*args), leaves_of(args, torch), grad_out, cfg, torch)
        except Exception as err:  # noqa: BLE001 - one implementation failing must not end the run
            if cfg.smoke:
                raise
            row["impls"][impl] = failure(err, torch)
        finally:
            args = None  # drop the inputs before the next implementation allocates its own
            release(torch, cfg.cuda)
    im = row["impls"]
    for other in ("eager", "compiled"):
        if im.get("triton", {}).get("status") == "ok" and im.get(other, {}).get("status") == "ok":
            row[f"speedup_vs_{other}"] = round(im[other]["fwd_bwd_ms"] / im["triton"]["fwd_bwd_ms"], 3)
            row[f"fwd_speedup_vs_{other}"] = round(im[other]["fwd_ms"] / im["triton"]["fwd_ms"], 3)
    return row


def check(fn, ref, make, torch) -> list[str]:
    """Which of output / input gradients of ``fn`` disagree with ``ref`` on the same inputs (smoke)."""
    results = []
    for f in (fn, ref):
        torch.manual_seed(0)
        args = make()
        out = f(*args)
        torch.manual_seed(1)  # not randn_like: it copies out's strides, which differ between backends
        out.backward(torch.randn(out.shape, dtype=out.dtype, device=out.device))
        results.append([out] + [t.grad for t in leaves_of(args, torch)])
    bad = []
    for i, (a, b) in enumerate(zip(*results)):  # loose, for bf16: 5% of the reference's magnitude
        a, b = a.detach().float(), b.detach().float()
        if a.shape != b.shape or not torch.allclose(a, b, rtol=5e-2, atol=5e-2 * max(1.0, b.abs().max().item())):
            bad.append("output" if i == 0 else f"grad of input {i - 1}")
    return bad


def attention_backends(device, torch) -> list:
    """(requested names, AttentionBackend) for each distinct thing that runs on ``device``."""
    from dit_lora.kernels.attention import ATTENTION_BACKENDS, AttentionBackend, resolve_backend

    seen: dict[str, tuple[list, object]] = {}
    for name in ATTENTION_BACKENDS:
        backend = resolve_backend(name, device)
        seen.setdefault(backend.name, ([], backend))[0].append(name)
    # resolve_backend picks FA3 over FA2; time every installed flash-attn entry point.
    for label, module in (("flash_attn_3", "flash_attn_interface"), ("flash_attn_2", "flash_attn")):
        if device.type == "cuda" and label not in seen:
            try:
                fn = importlib.import_module(module).flash_attn_func
            except Exception:  # noqa: BLE001 - missing or built for another torch: not installed
                continue
            order = resolve_backend("flash", device).sdpa_order
            seen[label] = (["flash-attn package"], AttentionBackend(label, "flash", order, fn))
    return list(seen.values())


def run_attention(requested, backend, b, n, heads, dh, cfg, torch) -> dict:
    """Softmax attention on one backend at one shape: ms and TFLOP/s forward and forward+backward."""
    from torch.nn.attention import sdpa_kernel

    from dit_lora.kernels.attention import attention, attention_flops, attention_reference

    row = {"kind": "attention", "backend": backend.name, "requested": requested, "batch": b, "tokens": n,
           "heads": heads, "head_dim": dh, "note": backend.note}
    qkv = None
    try:
        torch.manual_seed(0)
        # (B, N, H, Dh) leaves seen heads-first, the layout dit-lora's attention processors pass in.
        qkv = [torch.randn(b, n, heads, dh, device=cfg.device, dtype=cfg.dtype, requires_grad=True) for _ in range(3)]

        def call():
            return attention(*(t.transpose(1, 2) for t in qkv), None, backend)

        if backend.flash_fn is None and backend.sdpa_order and len(backend.sdpa_order) > 1:
            # attention() falls through its priority list; say whether the first choice takes these inputs.
            first = backend.sdpa_order[0]
            try:
                with sdpa_kernel([first]):
                    torch.nn.functional.scaled_dot_product_attention(*(t.transpose(1, 2) for t in qkv))
                row["first_choice"] = f"{first.name}: ok"
            except Exception as err:  # noqa: BLE001
                row["first_choice"] = f"{first.name} refused ({failure(err, torch)['error']}): fell through"
        if cfg.smoke:
            bad = check(lambda *a: attention(*a, None, backend), attention_reference,
                        lambda: [t.detach().transpose(1, 2).requires_grad_() for t in qkv], torch)
            if bad:
                raise AssertionError(f"attention {backend.name}: {', '.join(bad)} disagree with the reference")
        row.update(measure(call, qkv, torch.randn(b, heads, n, dh, device=cfg.device, dtype=cfg.dtype), cfg, torch))
        flops = attention_flops(b, heads, n, n, dh)
        bwd_ms = row["fwd_bwd_ms"] - row["fwd_ms"]
        row.update(fwd_tflops=round(flops / row["fwd_ms"] / 1e9, 1), bwd_ms=round(bwd_ms, 4),
                   bwd_tflops=round(BWD_FLOPS * flops / bwd_ms / 1e9, 1) if bwd_ms > 0 else None,
                   fwd_bwd_tflops=round((1 + BWD_FLOPS) * flops / row["fwd_bwd_ms"] / 1e9, 1))
    except Exception as err:  # noqa: BLE001 - a backend that cannot run these inputs is a result too
        if cfg.smoke:
            raise
        row.update(failure(err, torch))
    finally:
        qkv = None
        release(torch, cfg.cuda)
    return row


def decide(rows, device_name: str, threshold: float) -> list[dict]:
    """Per MEASURED_DEFAULTS key: triton, compiled or eager, by the rule in the module docstring."""
    decisions = []
    for key in dict.fromkeys(r["key"] for r in rows if r["kind"] == "op"):
        rs = [r for r in rows if r["kind"] == "op" and r["key"] == key]
        sp = [r["speedup_vs_eager"] for r in rs if "speedup_vs_eager" in r]
        comp = [r["impls"]["eager"]["fwd_bwd_ms"] / r["impls"]["compiled"]["fwd_bwd_ms"] for r in rs
                if all(r["impls"].get(i, {}).get("status") == "ok" for i in ("eager", "compiled"))]
        # A shape where eager ran but Triton did not (OOM, error) counts against Triton like a slower one.
        lost = sum(1 for r in rs if r["impls"].get("eager", {}).get("status") == "ok" and "speedup_vs_eager" not in r)
        med, worst = (statistics.median(sp), min(sp)) if sp else (None, None)
        comp_med = statistics.median(comp) if comp else None
        if med is not None and med >= threshold and worst >= 1.0 and not lost:
            impl = "triton"
        else:
            impl = "compiled" if comp_med is not None and comp_med > 1.0 else "eager"
        ops = ", ".join(dict.fromkeys(r["op"] for r in rs))
        evidence = (f"benchmarks/kernels/ops_gpu.py on {device_name} ({ops}, bf16 fwd+bwd, "
                    + f"{len(sp)}/{len(rs)} shapes): Triton "
                    + (f"median {med:.2f}x eager (slowest shape {worst:.2f}x)" if sp else "ran at no shape")
                    + (f", failed at {lost} shape(s) where eager ran" if lost else "")
                    + (f"; torch.compile median {comp_med:.2f}x eager" if comp_med is not None else ""))
        decisions.append({"key": key, "impl": impl, "median_speedup": med, "worst_speedup": worst,
                          "compiled_vs_eager": comp_med, "shapes": len(sp), "evidence": evidence})
    return decisions


def snippet(decisions, device_type: str) -> str:
    """Ready-to-paste MEASURED_DEFAULTS for dit_lora/kernels/defaults.py (eager entries as comments)."""
    lines = ["MEASURED_DEFAULTS: dict[str, dict[str, tuple[str, str]]] = {", f"    {json.dumps(device_type)}: {{"]
    for d in decisions:
        if d["impl"] == "eager":
            lines.append(f"        # {d['key']}: eager (the default) -- {d['evidence']}")
        else:
            lines.append(f"        {json.dumps(d['key'])}: ({json.dumps(d['impl'])}, {json.dumps(d['evidence'])}),")
    lines.append("        # layernorm (plain LayerNorm, e.g. CogVideoX q/k norms): not measured here, stays eager")
    return "\n".join(lines + ["    },", "}"])


def fmt(v, spec=".3f") -> str:
    return "" if v is None else format(v, spec)


def markdown(rows, decisions, env, settings) -> str:
    """The results section for benchmarks/RESULTS.md: op table, attention table, decisions, snippet."""
    dev = env["device"]
    lines = ["**SMOKE RUN on CPU (Triton interpreter): not performance numbers.**", ""] if settings["smoke"] else []
    lines += [device_line(env) if env.get("gpu") else f"Device: {dev}, torch {env['torch']}.",
              f"Triton {env.get('triton')}; bf16; warmup {settings['warmup']}, median of {settings['repeats']}; ms "
              + ("(CUDA events, device time)." if env.get("gpu") else "(wall clock)."), "",
              "| device | op | shape (B x N x D) | eager ms | compiled ms | triton ms | triton vs eager | "
              "triton vs compiled | fwd ms (eager / compiled / triton) | compile s |", "|---|---|---|" + "---:|" * 7]
    for r in (r for r in rows if r["kind"] == "op"):
        def cell(impl, field="fwd_bwd_ms", im=r["impls"]):
            e = im.get(impl, {})
            return fmt(e.get(field)) if e.get("status") == "ok" else e.get("status", "")

        lines.append(f"| {dev} | {r['op']} | {r['batch']} x {r['tokens']} x {r['hidden']} | {cell('eager')} | "
                     f"{cell('compiled')} | {cell('triton')} | {fmt(r.get('speedup_vs_eager'), '.2f')} | "
                     f"{fmt(r.get('speedup_vs_compiled'), '.2f')} | {cell('eager', 'fwd_ms')} / "
                     f"{cell('compiled', 'fwd_ms')} / {cell('triton', 'fwd_ms')} | "
                     f"{cell('compiled', 'first_call_s')} |")
    attn = [r for r in rows if r["kind"] == "attention"]
    lines += ["", f"Attention, head dim {settings['head_dim']}, batch {settings['attention_batch']}; TFLOP/s from "
              f"attention_flops (forward 4*B*H*N*N*D; backward counted as {BWD_FLOPS}x forward, FlashAttention's "
              "convention; bwd ms = fwd+bwd ms - fwd ms).", "",
              "| device | backend (requested as) | tokens | heads | fwd ms | fwd TFLOP/s | fwd+bwd ms | bwd TFLOP/s | "
              "note |", "|---|---|---:|---:|---:|---:|---:|---:|---|"]
    for r in attn:
        note = r.get("error") or r.get("first_choice") or r.get("note", "")
        lines.append(f"| {dev} | {r['backend']} ({', '.join(r['requested'])}) | {r['tokens']} | {r['heads']} | "
                     f"{fmt(r.get('fwd_ms')) or r.get('status')} | {fmt(r.get('fwd_tflops'), '.1f')} | "
                     f"{fmt(r.get('fwd_bwd_ms'))} | {fmt(r.get('bwd_tflops'), '.1f')} | {note} |")
    for shape in dict.fromkeys((r["tokens"], r["heads"]) for r in attn):
        ok = [r for r in attn if (r["tokens"], r["heads"]) == shape and r.get("status") == "ok"]
        if ok:  # does --attention_backend auto pick the fastest?
            best = min(ok, key=lambda r: r["fwd_bwd_ms"])["backend"]
            lines.append(f"\n{shape[0]} tokens x {shape[1]} heads: fastest fwd+bwd {best}; auto runs "
                         f"{settings['auto_backend']}.")
    lines += ["", "| op (defaults key) | median triton vs eager | slowest shape | compiled vs eager | default |",
              "|---|---:|---:|---:|---|"]
    lines += [f"| {d['key']} | {fmt(d['median_speedup'], '.2f')} | {fmt(d['worst_speedup'], '.2f')} | "
              f"{fmt(d['compiled_vs_eager'], '.2f')} | {d['impl']} |" for d in decisions]
    return "\n".join(lines + ["", "```python", snippet(decisions, env["device_type"]), "```"])


def parse_list(text: str, cast=str) -> list:
    return [] if text in ("", "none") else [cast(t) for t in text.split(",") if t]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", help="JSON results (default benchmarks/kernels/ops_gpu.json; --smoke: none)")
    ap.add_argument("--markdown", help="Also write the RESULTS.md section to this file.")
    for flag, default in (("ops", OPS), ("impls", IMPLS), ("hidden", HIDDEN), ("tokens", TOKENS),
                          ("attention_tokens", ATTN_TOKENS), ("attention_heads", ATTN_HEADS)):
        ap.add_argument(f"--{flag}", default=",".join(map(str, default)), help="comma-separated (default: %(default)s)")
    ap.add_argument("--attention", default="all", help="all, none, or resolved backend names (cudnn,flash,"
                                                        "efficient,sdpa,math,flash_attn_2,flash_attn_3)")
    ap.add_argument("--warmup", type=int, default=5)
    ap.add_argument("--repeats", type=int, default=20)
    ap.add_argument("--smoke", action="store_true", help="No GPU needed: tiny shapes on CPU under TRITON_INTERPRET=1, "
                                                          "one call each, checked against the references.")
    args = ap.parse_args(argv)
    if any(o not in OPS for o in parse_list(args.ops)) or any(i not in IMPLS for i in parse_list(args.impls)):
        ap.error(f"--ops: subset of {','.join(OPS)}; --impls: subset of {','.join(IMPLS)}")

    import torch

    cuda = torch.cuda.is_available()
    if not cuda and not args.smoke:
        print(no_cuda_message("kernels/ops_gpu.py", torch), file=sys.stderr)
        return 2
    if args.smoke and not cuda:
        os.environ["TRITON_INTERPRET"] = "1"  # read when the kernels are decorated, i.e. at the imports below
    from dit_lora.kernels.attention import resolve_backend
    from dit_lora.kernels.defaults import SPEEDUP_TO_ENABLE
    from dit_lora.kernels.triton_launch import triton_installed

    cfg = argparse.Namespace(smoke=args.smoke, cuda=cuda, device=torch.device("cuda" if cuda else "cpu"),
                             dtype=torch.bfloat16, impls=parse_list(args.impls), warmup=args.warmup,
                             repeats=args.repeats)
    if args.smoke:
        cfg.warmup, cfg.repeats, batch, head_dim = 0, 1, SMOKE["batch"], SMOKE["head_dim"]
        hidden, tokens, attn_shapes = [SMOKE["hidden"]], [SMOKE["tokens"]], [(SMOKE["tokens"], SMOKE["heads"])]
    else:
        batch, head_dim = 1, HEAD_DIM
        hidden, tokens = parse_list(args.hidden, int), parse_list(args.tokens, int)
        attn_shapes = [(n, h) for n in parse_list(args.attention_tokens, int)
                       for h in parse_list(args.attention_heads, int)]
    env = env_info(torch)
    env.update(device=env.get("gpu") or "cpu (smoke test)", device_type=cfg.device.type,
               triton=importlib.import_module("triton").__version__ if triton_installed() else None,
               triton_interpret=os.environ.get("TRITON_INTERPRET"))
    print(f"device: {env['device']}, torch {env['torch']}, triton {env['triton']}", flush=True)
    settings = {"dtype": "bfloat16", "warmup": cfg.warmup, "repeats": cfg.repeats, "ops": parse_list(args.ops),
                "impls": cfg.impls, "hidden": hidden, "tokens": tokens, "batch": batch, "attention_batch": batch,
                "attention_shapes": attn_shapes, "head_dim": head_dim, "smoke": args.smoke,
                "auto_backend": resolve_backend("auto", cfg.device).name,
                "timing": "CUDA events, device time (torch.cuda._sleep queued ahead), median; grads set to None "
                          "before each call; forward timed with grad enabled, as in training",
                "compile": "first_call_s of compiled = dynamo + inductor compile, fresh per shape after "
                           "torch._dynamo.reset(); inductor's on-disk cache can shorten it on reruns",
                "attention_flops": f"forward 4*B*H*N*N*D; backward {BWD_FLOPS}x forward (FlashAttention convention)",
                "decision_rule": f"triton if median fwd+bwd speedup over eager >= {SPEEDUP_TO_ENABLE}x, no shape "
                                 "< 1.0x and none failing where eager ran; else compiled if its median speedup over "
                                 "eager > 1.0x; else eager"}
    out = args.out or (None if args.smoke else str(REPO / "benchmarks" / "kernels" / "ops_gpu.json"))
    created, rows, failures = time.strftime("%Y-%m-%dT%H:%M:%S%z"), [], []

    def save():
        """Decisions and table so far, written after every row so a run cut short keeps what it measured."""
        decisions = decide(rows, env["device"], SPEEDUP_TO_ENABLE)
        table = markdown(rows, decisions, env, settings)
        if out:
            Path(out).parent.mkdir(parents=True, exist_ok=True)
            Path(out).write_text(json.dumps({"benchmark": "kernels/ops_gpu", "created": created, "environment": env,
                                             "settings": settings, "results": rows, "decisions": decisions},
                                            indent=2) + "\n")
        if args.markdown:
            Path(args.markdown).write_text(table + "\n")
        return decisions, table

    t_start = time.perf_counter()
    ops = op_table(torch)
    for name in parse_list(args.ops):
        if args.smoke:  # correctness first: Triton and (for one op) compiled against the eager reference
            _, tri, ref, make = ops[name]
            impls = [("triton", tri)]
            if name == SMOKE_COMPILED_OP and "compiled" in cfg.impls:
                impls.append(("compiled", torch.compile(ref, dynamic=False)))
            for label, fn in impls:
                bad = check(fn, ref, lambda: make(batch, tokens[0], hidden[0], cfg.device, cfg.dtype), torch)
                failures += [f"{name} {label}: {t} disagrees with the reference" for t in bad]
        for d in hidden:
            for n in tokens:
                rows.append(row := run_op(name, ops[name], batch, n, d, cfg, torch))
                save()
                print(f"{name:17s} N={n:6d} D={d:5d} " + "  ".join(
                    f"{k} {v['fwd_bwd_ms']:.3f} ms" if v["status"] == "ok" else f"{k} {v['status']}"
                    for k, v in row["impls"].items()) + f"  triton vs eager {row.get('speedup_vs_eager', '-')}x",
                    flush=True)
    wanted = None if args.attention == "all" else set(parse_list(args.attention))
    for requested, backend in attention_backends(cfg.device, torch):
        if wanted is not None and backend.name not in wanted:
            continue
        for n, h in attn_shapes:
            rows.append(row := run_attention(requested, backend, batch, n, h, head_dim, cfg, torch))
            save()
            print(f"attention {backend.name:12s} N={n:6d} H={h:3d} " + (
                f"fwd {row['fwd_ms']:.3f} ms ({row['fwd_tflops']} TFLOP/s), fwd+bwd {row['fwd_bwd_ms']:.3f} ms, "
                f"bwd {row.get('bwd_tflops')} TFLOP/s" if row.get("status") == "ok" else row.get("error", "")),
                flush=True)

    decisions, table = save()
    print("\n" + ("smoke: the snippet below is NOT a measurement; do not paste it\n" if args.smoke else "")
          + snippet(decisions, cfg.device.type), flush=True)
    if out:
        print(f"results: {out}")
    if not args.smoke:
        print("\n" + table)
        return 0
    if failures:
        print("smoke test FAILED:\n" + "\n".join(failures), flush=True)
        return 1
    print(f"smoke test passed in {time.perf_counter() - t_start:.1f} s (no performance numbers recorded)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
