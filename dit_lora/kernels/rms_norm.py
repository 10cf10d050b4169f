"""Fused RMSNorm in Triton, with the plain PyTorch reference it is tested against.

``y = x * rsqrt(mean(x**2) + eps) * weight`` over the last dimension. Statistics and accumulation
are fp32 whatever the input dtype, and the output is rounded once, to ``out_dtype``.

Every kernel takes a ``BLOCK_M x BLOCK_D`` tile of rows; ``BLOCK_D`` covers the whole hidden size
(masked past ``D``), so a row's statistics never need a second pass over memory. Per-feature
gradient sums (here ``dweight``) are written by each program as fp32 partial sums into a buffer
that torch reduces afterwards: no atomics, so the result is bitwise reproducible.
"""

from __future__ import annotations

import torch
from torch.autograd.function import once_differentiable

from dit_lora.kernels.optional_triton import tl, triton
from dit_lora.kernels.triton_launch import at_least_fp32, kernel_dtype, reduction_programs, require_triton, tile_config

if triton is not None:

    @triton.jit
    def _rms_norm_fwd_kernel(
        X, W, Y, RSTD, n_rows, D, eps, HAS_WEIGHT: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_D: tl.constexpr
    ):
        rows = tl.program_id(0) * BLOCK_M + tl.arange(0, BLOCK_M)
        cols = tl.arange(0, BLOCK_D)
        row_ok = rows < n_rows
        col_ok = cols < D
        mask = row_ok[:, None] & col_ok[None, :]
        # int64: video latents reach more than 2**31 elements per tensor.
        offs = rows.to(tl.int64)[:, None] * D + cols[None, :]
        x = tl.load(X + offs, mask=mask, other=0.0).to(tl.float32)
        rstd = 1.0 / tl.sqrt(tl.sum(x * x, axis=1) / D + eps)
        # Same order as the reference (x * rstd, then * w): an Inf row gives the same NaN/0 pattern.
        y = x * rstd[:, None]
        if HAS_WEIGHT:
            w = tl.load(W + cols, mask=col_ok, other=0.0).to(tl.float32)
            y = y * w[None, :]
        tl.store(Y + offs, y.to(Y.dtype.element_ty), mask=mask)
        tl.store(RSTD + rows, rstd, mask=row_ok)

    @triton.jit
    def _rms_norm_bwd_kernel(
        DY,
        X,
        W,
        RSTD,
        DX,
        DW_PART,
        n_rows,
        D,
        n_blocks,
        HAS_WEIGHT: tl.constexpr,
        NEED_DX: tl.constexpr,
        NEED_DW: tl.constexpr,
        BLOCK_M: tl.constexpr,
        BLOCK_D: tl.constexpr,
    ):
        pid = tl.program_id(0)
        n_prog = tl.num_programs(0)
        cols = tl.arange(0, BLOCK_D)
        col_ok = cols < D
        if HAS_WEIGHT:
            w = tl.load(W + cols, mask=col_ok, other=0.0).to(tl.float32)
        dw_acc = tl.zeros([BLOCK_D], dtype=tl.float32)
        for blk in range(pid, n_blocks, n_prog):
            rows = blk * BLOCK_M + tl.arange(0, BLOCK_M)
            row_ok = rows < n_rows
            mask = row_ok[:, None] & col_ok[None, :]
            offs = rows.to(tl.int64)[:, None] * D + cols[None, :]
            dy = tl.load(DY + offs, mask=mask, other=0.0).to(tl.float32)
            x = tl.load(X + offs, mask=mask, other=0.0).to(tl.float32)
            rstd = tl.load(RSTD + rows, mask=row_ok, other=0.0)
            xhat = x * rstd[:, None]
            if NEED_DX:
                if HAS_WEIGHT:
                    g = dy * w[None, :]
                else:
                    g = dy
                # d/dx of x*rstd(x): the rstd term removes g's component along xhat.
                proj = tl.sum(g * xhat, axis=1) / D
                dx = (g - xhat * proj[:, None]) * rstd[:, None]
                tl.store(DX + offs, dx.to(DX.dtype.element_ty), mask=mask)
            if NEED_DW:
                dw_acc += tl.sum(dy * xhat, axis=0)
        if NEED_DW:
            tl.store(DW_PART + pid.to(tl.int64) * D + cols, dw_acc, mask=col_ok)


def _rms_norm_fwd(
    x2d: torch.Tensor, weight: torch.Tensor | None, eps: float, out_dtype: torch.dtype
) -> tuple[torch.Tensor, torch.Tensor]:
    """Launch the forward kernel on contiguous ``(M, D)`` rows; returns ``(y, rstd)``."""
    m, d = x2d.shape
    y = torch.empty((m, d), dtype=kernel_dtype(out_dtype), device=x2d.device)
    rstd = torch.empty((m,), dtype=torch.float32, device=x2d.device)
    if m == 0:
        return y.to(out_dtype), rstd
    block_d, block_m, num_warps = tile_config(d, m)
    _rms_norm_fwd_kernel[(triton.cdiv(m, block_m),)](
        x2d,
        weight if weight is not None else x2d,
        y,
        rstd,
        m,
        d,
        float(eps),
        HAS_WEIGHT=weight is not None,
        BLOCK_M=block_m,
        BLOCK_D=block_d,
        num_warps=num_warps,
    )
    return y.to(out_dtype), rstd


def _rms_norm_bwd(
    dy: torch.Tensor, x2d: torch.Tensor, weight: torch.Tensor | None, rstd: torch.Tensor, need_dx: bool, need_dw: bool
) -> tuple[torch.Tensor | None, torch.Tensor | None]:
    """Launch the backward kernel; returns ``(dx, dweight)`` (None where not needed)."""
    m, d = x2d.shape
    block_d, block_m, num_warps = tile_config(d, m)
    n_blocks = triton.cdiv(m, block_m)
    n_prog = reduction_programs(n_blocks, 1, x2d.device)
    dx = torch.empty((m, d), dtype=kernel_dtype(x2d.dtype), device=x2d.device) if need_dx else None
    dw_part = torch.zeros((n_prog, d), dtype=torch.float32, device=x2d.device) if need_dw else None
    if m > 0 and (need_dx or need_dw):
        _rms_norm_bwd_kernel[(n_prog,)](
            dy,
            x2d,
            weight if weight is not None else x2d,
            rstd,
            dx if dx is not None else x2d,
            dw_part if dw_part is not None else rstd,
            m,
            d,
            n_blocks,
            HAS_WEIGHT=weight is not None,
            NEED_DX=need_dx,
            NEED_DW=need_dw,
            BLOCK_M=block_m,
            BLOCK_D=block_d,
            num_warps=num_warps,
        )
    # dw_part exists exactly when need_dw (which needs a weight), dx exactly when need_dx
    dw = dw_part.sum(0).to(weight.dtype) if dw_part is not None and weight is not None else None
    return (dx.to(x2d.dtype) if dx is not None else None), dw


class RMSNormFunction(torch.autograd.Function):
    """Autograd wrapper of the fused RMSNorm kernels: ``apply(x, weight, eps, out_dtype)``."""

    @staticmethod
    def forward(ctx, x, weight, eps, out_dtype):
        shape = x.shape
        x2d = x.reshape(-1, shape[-1]).contiguous()
        w = weight.contiguous() if weight is not None else None
        y, rstd = _rms_norm_fwd(x2d, w, eps, out_dtype)
        ctx.save_for_backward(x2d, w, rstd)
        ctx.x_shape = shape
        return y.view(shape)

    @staticmethod
    @once_differentiable
    def backward(ctx, grad_out):
        x2d, w, rstd = ctx.saved_tensors
        need_dx = ctx.needs_input_grad[0]
        need_dw = w is not None and ctx.needs_input_grad[1]
        dy = grad_out.reshape(x2d.shape).contiguous()
        dx, dw = _rms_norm_bwd(dy, x2d, w, rstd, need_dx, need_dw)
        return (dx.view(ctx.x_shape) if dx is not None else None), dw, None, None


def rms_norm_reference(
    x: torch.Tensor, weight: torch.Tensor | None, eps: float, out_dtype: torch.dtype | None = None
) -> torch.Tensor:
    """RMSNorm over the last dimension in plain PyTorch, computed in fp32 and cast to ``out_dtype``."""
    xf = at_least_fp32(x)
    y = xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + eps)
    if weight is not None:
        y = y * at_least_fp32(weight)
    return y.to(out_dtype or x.dtype)


def rms_norm(
    x: torch.Tensor, weight: torch.Tensor | None, eps: float, out_dtype: torch.dtype | None = None
) -> torch.Tensor:
    """RMSNorm over the last dimension of ``x`` (any shape ``(..., D)``) with the fused Triton kernels.

    ``weight`` is ``(D,)`` or None. The result has ``out_dtype`` (default ``x.dtype``); gradients
    for ``x`` and ``weight`` come back in their own dtypes. Raises RuntimeError when Triton cannot
    run on ``x``'s device (see :func:`dit_lora.kernels.triton_launch.triton_usable`).
    """
    require_triton(x.device, "rms_norm")
    d = x.shape[-1]
    if weight is not None and tuple(weight.shape) != (d,):
        raise ValueError(f"rms_norm: weight has shape {tuple(weight.shape)}, expected ({d},)")
    return RMSNormFunction.apply(x, weight, float(eps), out_dtype or x.dtype)
