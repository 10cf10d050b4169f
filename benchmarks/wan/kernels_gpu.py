#!/usr/bin/env python
"""Wan's fused-kernel patch points on a CUDA GPU: Triton vs eager diffusers vs ``torch.compile``, per op and per block.

    python benchmarks/wan/kernels_gpu.py --out benchmarks/wan/kernels_gpu.json --markdown /tmp/wan_k.md
    python benchmarks/wan/kernels_gpu.py --models 14b --block_impls eager,fused   # no block compile
    python benchmarks/wan/kernels_gpu.py --smoke   # CPU + Triton interpreter, tiny shapes: checks the script only

Shapes (issue 27's setting, as ``benchmarks/wan/step_gpu.py``): 81 x 480 x 832 gives 32,760 video tokens, UMT5
text 512 tokens, batch 1, bf16; Wan 2.1 T2V 1.3B (dim 1536, 12 heads, ffn 8960) and 14B (dim 5120, 40 heads, ffn
13824), from diffusers' ``scripts/convert_wan_to_diffusers.py``.

Ops, with the dtypes Wan's block gives them (``families/wan/kernels.py``), every input requiring grad (as
``benchmarks/kernels/ops_gpu.py``), each three ways: the Triton kernel, diffusers' own expression (eager), and
``torch.compile`` of that expression (``dynamic=False``; compile time reported as ``first_call_s``, never timed):

* ``modulate``: ``(FP32LayerNorm(x.float()) * (1 + scale) + shift).type_as(x)``, x bf16 (1, N, D), scale/shift
  fp32 (1, D), eps 1e-6; Triton: ``layernorm_modulate(x, None, None, scale, shift, eps).type_as(x)``.
* ``gated_residual``: ``(h.float() + y * gate).type_as(h)``, h and y bf16, gate fp32; Triton: ``gated_residual``.
* ``rms_norm``: ``torch.nn.RMSNorm`` (``F.rms_norm``) over D with a bf16 weight (the q/k norms); Triton: ``rms_norm``.

Blocks: one ``WanTransformerBlock`` in bf16 (``scale_shift_table`` and ``norm2`` fp32 as ``from_pretrained`` keeps
them), weights frozen, ``hidden_states`` requiring grad (a LoRA step's gradient path through a frozen block),
forward + backward: ``eager`` (diffusers), ``fused`` (``patch_model`` with Wan's points and ``--kernels on``,
attention left on diffusers' SDPA dispatch: the fused ops alone), ``fused_attention`` (the same plus dit-lora's
attention processor on ``--attention_backend auto``), ``compiled`` (``torch.compile`` of diffusers' block).

Timing as ``benchmarks/kernels/ops_gpu.py`` (its ``measure``): CUDA events, median of ``--repeats`` after
``--warmup``. On an H100 the default run takes about 2 to 3 minutes, most of it compiling the two blocks (skip
with ``--block_impls eager,fused,fused_attention``). Without CUDA (and without ``--smoke``) it exits with status 2.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

from benchmarks.common.gpu_step import device_line, env_info, no_cuda_message  # noqa: E402

MODELS = {"1.3b": {"dim": 1536, "heads": 12, "ffn": 8960}, "14b": {"dim": 5120, "heads": 40, "ffn": 13824}}
GRID, TEXT_TOKENS, EPS = (21, 30, 52), 512, 1e-6  # latent frames x height x width after the (1, 2, 2) patch
OPS = ("modulate", "gated_residual", "rms_norm")
IMPLS = ("triton", "eager", "compiled")
BLOCK_IMPLS = ("eager", "fused", "fused_attention", "compiled")
SMOKE_COMPILED_OP = "gated_residual"
SMOKE = {"dim": 24, "heads": 3, "ffn": 40, "grid": (3, 1, 5), "text": 7}


def op_table(torch) -> dict:
    """op -> (triton fn, diffusers' eager expression, builder(n, d, device) -> args)."""
    import torch.nn.functional as F

    from dit_lora.kernels.gated_residual import gated_residual
    from dit_lora.kernels.modulate import layernorm_modulate
    from dit_lora.kernels.rms_norm import rms_norm

    def leaf(dev, dt, *shape, scale=1.0, offset=0.0):
        return (torch.randn(*shape, device=dev) * scale + offset).to(dt).requires_grad_()

    bf16, fp32 = torch.bfloat16, torch.float32
    return {
        "modulate": (lambda x, s, t: layernorm_modulate(x, None, None, s, t, EPS).type_as(x),
                     lambda x, s, t: (F.layer_norm(x.float(), (x.shape[-1],), None, None, EPS) * (1 + s[:, None])
                                      + t[:, None]).type_as(x),
                     lambda n, d, dev: (leaf(dev, bf16, 1, n, d), leaf(dev, fp32, 1, d, scale=0.1),
                                        leaf(dev, fp32, 1, d, scale=0.1))),
        "gated_residual": (lambda h, g, y: gated_residual(h, g, y).type_as(h),
                           lambda h, g, y: (h.float() + y * g[:, None]).type_as(h),
                           lambda n, d, dev: (leaf(dev, bf16, 1, n, d), leaf(dev, fp32, 1, d),
                                              leaf(dev, bf16, 1, n, d))),
        "rms_norm": (lambda x, w: rms_norm(x, w, EPS, x.dtype),
                     lambda x, w: F.rms_norm(x, (x.shape[-1],), w, EPS),
                     lambda n, d, dev: (leaf(dev, bf16, 1, n, d), leaf(dev, bf16, d, scale=0.1, offset=1.0))),
    }


def run_op(name, spec, n, d, cfg, torch) -> dict:
    """One op at one shape, every implementation on identically seeded inputs."""
    from benchmarks.kernels.ops_gpu import check, failure, leaves_of, measure, release

    tri, eager, make = spec
    row = {"kind": "op", "op": name, "tokens": n, "hidden": d, "impls": {}}
    for impl in cfg.impls:
        if impl == "compiled" and cfg.smoke and name != SMOKE_COMPILED_OP:
            continue
        try:
            torch.manual_seed(0)
            args = make(n, d, cfg.device)
            if impl == "compiled":
                torch._dynamo.reset()
            fn = {"triton": tri, "eager": eager}.get(impl) or torch.compile(eager, dynamic=False)
            if cfg.smoke:
                bad = check(fn, eager, lambda: make(n, d, cfg.device), torch)
                cfg.failures += [f"{name} {impl}: {b} disagrees with diffusers' expression" for b in bad]
            grad_out = torch.randn(args[0].shape, device=cfg.device, dtype=args[0].dtype)
            row["impls"][impl] = measure(lambda: fn(*args), leaves_of(args, torch), grad_out, cfg, torch)
        except Exception as err:  # noqa: BLE001 - one implementation failing must not end the run
            if cfg.smoke:
                raise
            row["impls"][impl] = failure(err, torch)
        finally:
            args = None
            release(torch, cfg.cuda)
    _speedups(row)
    return row


def _speedups(row) -> None:
    im = row["impls"]
    base = "triton" if row["kind"] == "op" else "fused"
    for other in ("eager", "compiled"):
        if im.get(base, {}).get("status") == "ok" and im.get(other, {}).get("status") == "ok":
            row[f"{base}_vs_{other}"] = round(im[other]["fwd_bwd_ms"] / im[base]["fwd_bwd_ms"], 3)


def build_block(shape, device, torch):
    """A bf16 ``WanTransformerBlock`` with random weights, fp32 where from_pretrained keeps it, frozen."""
    from diffusers.models.transformers.transformer_wan import WanTransformerBlock

    torch.manual_seed(0)
    with torch.device(device):
        block = WanTransformerBlock(shape["dim"], shape["ffn"], shape["heads"], cross_attn_norm=True, eps=EPS)
    block.to(torch.bfloat16).requires_grad_(False)
    block.scale_shift_table.data = block.scale_shift_table.data.float()
    block.norm2.float()
    return block


def block_inputs(shape, grid, text, device, torch) -> dict:
    """Block inputs as WanTransformer3DModel hands them over: bf16 streams, fp32 temb (B, 6, D), fp32 RoPE."""
    from diffusers.models.transformers.transformer_wan import WanRotaryPosEmbed

    head_dim = shape["dim"] // shape["heads"]
    rope = WanRotaryPosEmbed(head_dim, (1, 1, 1), 1024).to(device)
    cos, sin = rope(torch.zeros(1, 1, *grid, device=device))  # WanTransformer3DModel's RoPE for this latent grid
    tokens = cos.shape[1]
    gen = torch.Generator(device=device).manual_seed(1)
    return {"hidden_states": torch.randn(1, tokens, shape["dim"], device=device, generator=gen,
                                         dtype=torch.bfloat16).requires_grad_(),
            "encoder_hidden_states": torch.randn(1, text, shape["dim"], device=device, generator=gen,
                                                 dtype=torch.bfloat16),
            "temb": torch.randn(1, 6, shape["dim"], device=device, generator=gen) * 0.1,
            "rotary_emb": (cos.float(), sin.float())}


def block_variant(impl, shape, cfg, torch):
    """The block for ``impl``: diffusers' own, patched (ops only, or ops and attention), or compiled."""
    from dit_lora.families.wan.kernels import patch_points
    from dit_lora.kernels import patch_model

    block = build_block(shape, cfg.device, torch)
    if impl in ("fused", "fused_attention"):
        counts = patch_model(block, patch_points(), kernels="on", attention=impl == "fused_attention",
                             attention_backend="auto" if cfg.cuda else "math")
        if counts["modulate"] != 1 or counts["rmsnorm"] != 4:
            raise RuntimeError(f"Wan's patch points did not all apply: {counts}")
    if impl == "compiled":
        torch._dynamo.reset()
        block = torch.compile(block, dynamic=False)
    return block


def run_block(model, shape, grid, text, cfg, torch) -> dict:
    """One Wan block, forward + backward, every ``--block_impls`` variant on the same inputs."""
    from benchmarks.kernels.ops_gpu import failure, measure, release

    row = {"kind": "block", "model": model, "tokens": grid[0] * grid[1] * grid[2], "text": text, **shape, "impls": {}}
    outputs = {}
    for impl in cfg.block_impls:
        block = inputs = None
        try:
            block = block_variant(impl, shape, cfg, torch)
            inputs = block_inputs(shape, grid, text, cfg.device, torch)
            x = inputs["hidden_states"]
            grad_out = torch.randn(x.shape, device=cfg.device, dtype=x.dtype,
                                   generator=torch.Generator(device=cfg.device).manual_seed(2))
            row["impls"][impl] = measure(lambda: block(**inputs), [x], grad_out, cfg, torch)
            if cfg.smoke:
                outputs[impl] = block(**inputs).detach().float()
        except Exception as err:  # noqa: BLE001
            if cfg.smoke:
                raise
            row["impls"][impl] = failure(err, torch)
        finally:
            block = inputs = None
            release(torch, cfg.cuda)
    for impl, out in outputs.items():  # smoke: every variant computes diffusers' block
        ref = outputs["eager"]
        if not torch.allclose(out, ref, rtol=5e-2, atol=5e-2 * max(1.0, float(ref.abs().max()))):
            cfg.failures.append(f"block {impl}: output disagrees with diffusers' block")
    _speedups(row)
    return row


def markdown(rows, env, settings) -> str:
    """The results section for benchmarks/RESULTS.md."""
    def cell(r, impl, field="fwd_bwd_ms"):
        e = r["impls"].get(impl, {})
        return f"{e[field]:.3f}" if e.get("status") == "ok" else e.get("status", "")

    lines = ["**SMOKE RUN on CPU (Triton interpreter): not performance numbers.**", ""] if settings["smoke"] else []
    lines += [device_line(env) if env.get("gpu") else f"Device: cpu, torch {env['torch']}.",
              f"Triton {env.get('triton')}; bf16; warmup {settings['warmup']}, median of {settings['repeats']}.", "",
              "| op | N x D | eager ms | compiled ms | triton ms | triton vs eager | triton vs compiled | compile s |",
              "|---|---|---:|---:|---:|---:|---:|---:|"]
    for r in (r for r in rows if r["kind"] == "op"):
        lines.append(f"| {r['op']} | {r['tokens']} x {r['hidden']} | {cell(r, 'eager')} | {cell(r, 'compiled')} | "
                     f"{cell(r, 'triton')} | {r.get('triton_vs_eager', '')} | {r.get('triton_vs_compiled', '')} | "
                     f"{cell(r, 'compiled', 'first_call_s')} |")
    lines += ["", "| block | tokens (+ text) | " + " | ".join(f"{i} ms" for i in settings["block_impls"])
              + " | fused vs eager | fused vs compiled | peak MiB (eager / fused) |",
              "|---|---|" + "---:|" * (len(settings["block_impls"]) + 3)]
    for r in (r for r in rows if r["kind"] == "block"):
        peaks = " / ".join(str(r["impls"].get(i, {}).get("peak_mib", "")) for i in ("eager", "fused"))
        lines.append(f"| Wan {r['model']} (dim {r['dim']}, {r['heads']} heads) | {r['tokens']} (+{r['text']}) | "
                     + " | ".join(cell(r, i) for i in settings["block_impls"])
                     + f" | {r.get('fused_vs_eager', '')} | {r.get('fused_vs_compiled', '')} | {peaks} |")
    return "\n".join(lines)


def parse_list(text: str) -> list[str]:
    return [t for t in text.split(",") if t and t != "none"]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", help="JSON results (default benchmarks/wan/kernels_gpu.json; --smoke: none)")
    ap.add_argument("--markdown", help="Also write the RESULTS.md section to this file.")
    for flag, default in (("models", MODELS), ("ops", OPS), ("impls", IMPLS), ("block_impls", BLOCK_IMPLS)):
        ap.add_argument(f"--{flag}", default=",".join(default), help="comma-separated (default: %(default)s)")
    ap.add_argument("--grid", default=",".join(map(str, GRID)), help="latent frames,height,width after patching "
                    "(default %(default)s: 81 x 480 x 832, 32,760 tokens)")
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--repeats", type=int, default=10)
    ap.add_argument("--smoke", action="store_true", help="No GPU needed: tiny shapes on CPU under TRITON_INTERPRET=1, "
                                                          "one call each, checked against diffusers.")
    args = ap.parse_args(argv)
    for flag, allowed in (("models", MODELS), ("ops", OPS), ("impls", IMPLS), ("block_impls", BLOCK_IMPLS)):
        if any(v not in allowed for v in parse_list(getattr(args, flag))):
            ap.error(f"--{flag}: a subset of {','.join(allowed)}")

    import torch

    cuda = torch.cuda.is_available()
    if not cuda and not args.smoke:
        print(no_cuda_message("wan/kernels_gpu.py", torch), file=sys.stderr)
        return 2
    if args.smoke and not cuda:
        os.environ["TRITON_INTERPRET"] = "1"  # read when the kernels are decorated, i.e. at their first import
    cfg = argparse.Namespace(smoke=args.smoke, cuda=cuda, device=torch.device("cuda" if cuda else "cpu"),
                             impls=parse_list(args.impls), block_impls=parse_list(args.block_impls),
                             warmup=0 if args.smoke else args.warmup, repeats=1 if args.smoke else args.repeats,
                             failures=[])
    if args.smoke:  # CPU inductor takes ~12 s a function: compile one op (SMOKE_COMPILED_OP), no block
        cfg.block_impls = [i for i in cfg.block_impls if i != "compiled"]
    shapes = {"smoke": SMOKE} if args.smoke else {m: MODELS[m] for m in parse_list(args.models)}
    grid = SMOKE["grid"] if args.smoke else tuple(int(v) for v in args.grid.split(","))
    tokens, text = grid[0] * grid[1] * grid[2], SMOKE["text"] if args.smoke else TEXT_TOKENS
    env = env_info(torch)
    env["triton"] = __import__("triton").__version__
    print(f"device: {env.get('gpu') or 'cpu (smoke test)'}, torch {env['torch']}, triton {env['triton']}", flush=True)
    settings = {"dtype": "bfloat16", "warmup": cfg.warmup, "repeats": cfg.repeats, "models": shapes,
                "grid": grid, "tokens": tokens, "text": text, "impls": cfg.impls, "block_impls": cfg.block_impls,
                "smoke": args.smoke, "timing": "benchmarks/kernels/ops_gpu.py measure(): CUDA events, median"}
    out = args.out or (None if args.smoke else str(REPO / "benchmarks" / "wan" / "kernels_gpu.json"))
    t_start, rows, ops = time.perf_counter(), [], op_table(torch)
    for name in parse_list(args.ops):
        for d in dict.fromkeys(s["dim"] for s in shapes.values()):
            rows.append(row := run_op(name, ops[name], tokens, d, cfg, torch))
            print(f"{name:15s} N={tokens} D={d}: " + "  ".join(
                f"{k} {v.get('fwd_bwd_ms', v['status'])}" for k, v in row["impls"].items()), flush=True)
    for model, shape in shapes.items():
        rows.append(row := run_block(model, shape, grid, text, cfg, torch))
        print(f"block {model}: " + "  ".join(f"{k} {v.get('fwd_bwd_ms', v['status'])}"
                                             for k, v in row["impls"].items()), flush=True)
    table = markdown(rows, env, settings)
    if out:
        Path(out).parent.mkdir(parents=True, exist_ok=True)
        Path(out).write_text(json.dumps({"benchmark": "wan/kernels_gpu",
                                         "created": time.strftime("%Y-%m-%dT%H:%M:%S%z"), "environment": env, "settings": settings, "results": rows}, indent=2) + "\n")
        print(f"results: {out}")
    if args.markdown:
        Path(args.markdown).write_text(table + "\n")
    print("\n" + table)
    if args.smoke:
        if cfg.failures:
            print("smoke test FAILED:\n" + "\n".join(cfg.failures), flush=True)
            return 1
        print(f"smoke test passed in {time.perf_counter() - t_start:.1f} s (no performance numbers recorded)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
