"""Fused gated residual add in Triton, with the plain PyTorch reference it is tested against.

DiT, Sana and CogVideoX blocks add each attention/feed-forward output back through a per-sample
gate from the adaLN embedding::

    out = residual + gate[:, None, :] * y        # residual, y: (B, N, D); gate: (B, D)

Unfused, ``gate * y`` is materialised (and rounded) before the add; here each element is read
once, combined in fp32 and rounded once. The backward writes ``dy = gate * dout`` and the
per-sample ``dgate = sum_tokens(dout * y)`` in one pass; ``dresidual`` is ``dout`` itself.

The grid is ``(row blocks of one sample, sample)``, so every program reads the gate row of the
sample its rows belong to. ``dgate`` is reduced from fp32 per-program partial sums by torch
(deterministic, no atomics).
"""

from __future__ import annotations

import torch
from torch.autograd.function import once_differentiable

from dit_lora.kernels.optional_triton import tl, triton
from dit_lora.kernels.triton_launch import kernel_dtype, reduction_programs, require_triton, tile_config

if triton is not None:

    @triton.jit
    def _gated_residual_fwd_kernel(R, G, Y, OUT, N, D, BLOCK_M: tl.constexpr, BLOCK_D: tl.constexpr):
        sample = tl.program_id(1)
        tok = tl.program_id(0) * BLOCK_M + tl.arange(0, BLOCK_M)
        cols = tl.arange(0, BLOCK_D)
        col_ok = cols < D
        mask = (tok < N)[:, None] & col_ok[None, :]
        offs = (sample.to(tl.int64) * N + tok)[:, None] * D + cols[None, :]
        r = tl.load(R + offs, mask=mask, other=0.0).to(tl.float32)
        y = tl.load(Y + offs, mask=mask, other=0.0).to(tl.float32)
        g = tl.load(G + sample.to(tl.int64) * D + cols, mask=col_ok, other=0.0).to(tl.float32)
        out = r + g[None, :] * y
        tl.store(OUT + offs, out.to(OUT.dtype.element_ty), mask=mask)

    @triton.jit
    def _gated_residual_bwd_kernel(
        DOUT,
        G,
        Y,
        DY,
        DG_PART,
        N,
        D,
        n_blocks,
        NEED_DY: tl.constexpr,
        NEED_DG: tl.constexpr,
        BLOCK_M: tl.constexpr,
        BLOCK_D: tl.constexpr,
    ):
        pid = tl.program_id(0)
        n_prog = tl.num_programs(0)
        sample = tl.program_id(1)
        cols = tl.arange(0, BLOCK_D)
        col_ok = cols < D
        g = tl.load(G + sample.to(tl.int64) * D + cols, mask=col_ok, other=0.0).to(tl.float32)
        dg_acc = tl.zeros([BLOCK_D], dtype=tl.float32)
        for blk in range(pid, n_blocks, n_prog):
            tok = blk * BLOCK_M + tl.arange(0, BLOCK_M)
            mask = (tok < N)[:, None] & col_ok[None, :]
            offs = (sample.to(tl.int64) * N + tok)[:, None] * D + cols[None, :]
            dout = tl.load(DOUT + offs, mask=mask, other=0.0).to(tl.float32)
            if NEED_DY:
                tl.store(DY + offs, (g[None, :] * dout).to(DY.dtype.element_ty), mask=mask)
            if NEED_DG:
                y = tl.load(Y + offs, mask=mask, other=0.0).to(tl.float32)
                dg_acc += tl.sum(dout * y, axis=0)
        if NEED_DG:
            tl.store(DG_PART + (sample.to(tl.int64) * n_prog + pid) * D + cols, dg_acc, mask=col_ok)


def _gated_residual_fwd(residual, gate, y, out_dtype):
    """Launch the forward kernel on contiguous ``(B, N, D)`` residual/y and ``(B, D)`` gate."""
    bsz, n, d = residual.shape
    out = torch.empty((bsz, n, d), dtype=kernel_dtype(out_dtype), device=residual.device)
    if bsz * n == 0:
        return out.to(out_dtype)
    block_d, block_m, num_warps = tile_config(d, n)
    _gated_residual_fwd_kernel[(triton.cdiv(n, block_m), bsz)](
        residual, gate, y, out, n, d, BLOCK_M=block_m, BLOCK_D=block_d, num_warps=num_warps
    )
    return out.to(out_dtype)


def _gated_residual_bwd(dout, gate, y, need_dy, need_dg):
    """Launch the backward kernel; returns ``(dy, dgate)``: dy in y's dtype, dgate fp32, None where not needed."""
    bsz, n, d = dout.shape
    block_d, block_m, num_warps = tile_config(d, n)
    n_blocks = triton.cdiv(n, block_m)
    n_prog = reduction_programs(n_blocks, bsz, dout.device)
    dy = torch.empty(y.shape, dtype=kernel_dtype(y.dtype), device=y.device) if need_dy else None
    dg_part = torch.zeros((bsz, n_prog, d), dtype=torch.float32, device=dout.device) if need_dg else None
    if bsz * n > 0 and (need_dy or need_dg):
        _gated_residual_bwd_kernel[(n_prog, bsz)](
            dout,
            gate,
            y,
            dy if dy is not None else dout,
            dg_part if dg_part is not None else gate,
            n,
            d,
            n_blocks,
            NEED_DY=need_dy,
            NEED_DG=need_dg,
            BLOCK_M=block_m,
            BLOCK_D=block_d,
            num_warps=num_warps,
        )
    return (dy.to(y.dtype) if need_dy else None), (dg_part.sum(1) if need_dg else None)


class GatedResidualFunction(torch.autograd.Function):
    """Autograd wrapper of the fused kernels: ``apply(residual, gate, y)`` with gate ``(B, D)``."""

    @staticmethod
    def forward(ctx, residual, gate, y):
        out_dtype = torch.promote_types(torch.promote_types(residual.dtype, gate.dtype), y.dtype)
        gate_c, y_c = gate.contiguous(), y.contiguous()
        out = _gated_residual_fwd(residual.contiguous(), gate_c, y_c, out_dtype)
        ctx.save_for_backward(gate_c, y_c)
        ctx.residual_dtype = residual.dtype
        return out

    @staticmethod
    @once_differentiable
    def backward(ctx, grad_out):
        gate, y = ctx.saved_tensors
        need_dr, need_dg, need_dy = ctx.needs_input_grad
        dout = grad_out.contiguous()
        dy, dg = _gated_residual_bwd(dout, gate, y, need_dy, need_dg)
        dres = dout.to(ctx.residual_dtype) if need_dr else None
        return dres, (dg.to(gate.dtype) if dg is not None else None), dy


def gated_residual_reference(residual: torch.Tensor, gate: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """``residual + gate[:, None, :] * y`` in plain PyTorch (``gate`` ``(B, D)`` or ``(B, 1, D)``)."""
    if gate.dim() == 2:
        gate = gate[:, None, :]
    return residual + gate * y


def gated_residual(residual: torch.Tensor, gate: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """Fused ``residual + gate[:, None, :] * y`` (Triton), for ``(B, N, D)`` residual/y.

    ``gate`` is ``(B, D)`` or ``(B, 1, D)``, one row per sample. The output dtype is the promotion
    of the three inputs' dtypes; gradients come back in each input's own dtype. Raises
    RuntimeError when Triton cannot run on the inputs' device.
    """
    require_triton(residual.device, "gated_residual")
    if residual.dim() != 3 or residual.shape != y.shape:
        raise ValueError(
            f"gated_residual: residual {tuple(residual.shape)} and y {tuple(y.shape)} must both be (B, N, D)"
        )
    bsz, _, d = residual.shape
    if gate.dim() == 3 and gate.shape[1] == 1:
        gate = gate.squeeze(1)
    if tuple(gate.shape) != (bsz, d):
        raise ValueError(
            f"gated_residual: gate has shape {tuple(gate.shape)}; expected ({bsz}, {d}) or ({bsz}, 1, {d})"
        )
    return GatedResidualFunction.apply(residual, gate, y)
