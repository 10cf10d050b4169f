"""Fused LayerNorm + adaLN modulation in Triton, with the plain PyTorch reference it is tested against.

DiT-style blocks normalise the hidden states and then modulate them with a per-sample scale and
shift computed from the timestep/condition embedding::

    y = layer_norm(x, weight, bias) * (1 + scale[:, None, :]) + shift[:, None, :]

Unfused, that is three passes over ``(B, N, D)`` activations plus two saved intermediates; here it
is one read and one write, and the backward one more pass. Without ``scale``/``shift`` the same
kernels are a plain LayerNorm over any ``(..., D)`` tensor (the q/k norms of attention heads).

Correctness notes:

- The grid is ``(row blocks of one sample, sample)``, so a program never straddles two samples
  and reads the modulation row of the sample its rows belong to, not of its program index.
- Statistics and accumulation are fp32; the output is rounded once.
- ``dweight``/``dbias`` and the per-sample ``dscale``/``dshift`` are written by each program as
  fp32 partial sums and reduced by torch afterwards: deterministic, no atomics.
"""

from __future__ import annotations

import torch
from torch.autograd.function import once_differentiable

from dit_lora.kernels.optional_triton import tl, triton
from dit_lora.kernels.triton_launch import kernel_dtype, reduction_programs, require_triton, tile_config

if triton is not None:

    @triton.jit
    def _ln_mod_fwd_kernel(
        X,
        W,
        B,
        S,
        T,
        Y,
        MEAN,
        RSTD,
        N,
        D,
        eps,
        HAS_WEIGHT: tl.constexpr,
        HAS_BIAS: tl.constexpr,
        HAS_MOD: tl.constexpr,
        BLOCK_M: tl.constexpr,
        BLOCK_D: tl.constexpr,
    ):
        sample = tl.program_id(1)
        tok = tl.program_id(0) * BLOCK_M + tl.arange(0, BLOCK_M)
        cols = tl.arange(0, BLOCK_D)
        row_ok = tok < N
        col_ok = cols < D
        mask = row_ok[:, None] & col_ok[None, :]
        rows = sample.to(tl.int64) * N + tok
        offs = rows[:, None] * D + cols[None, :]
        x = tl.load(X + offs, mask=mask, other=0.0).to(tl.float32)
        mean = tl.sum(x, axis=1) / D
        # Padding columns must not count towards the variance, hence the where.
        xc = tl.where(mask, x - mean[:, None], 0.0)
        rstd = 1.0 / tl.sqrt(tl.sum(xc * xc, axis=1) / D + eps)
        y = xc * rstd[:, None]
        if HAS_WEIGHT:
            y = y * tl.load(W + cols, mask=col_ok, other=0.0).to(tl.float32)[None, :]
        if HAS_BIAS:
            y = y + tl.load(B + cols, mask=col_ok, other=0.0).to(tl.float32)[None, :]
        if HAS_MOD:
            mod = sample.to(tl.int64) * D + cols
            s = tl.load(S + mod, mask=col_ok, other=0.0).to(tl.float32)
            t = tl.load(T + mod, mask=col_ok, other=0.0).to(tl.float32)
            y = y * (1.0 + s[None, :]) + t[None, :]
        tl.store(Y + offs, y.to(Y.dtype.element_ty), mask=mask)
        tl.store(MEAN + rows, mean, mask=row_ok)
        tl.store(RSTD + rows, rstd, mask=row_ok)

    @triton.jit
    def _ln_bwd_rows(DY, X, MEAN, RSTD, sample, blk, N, D, cols, col_ok, BLOCK_M: tl.constexpr):
        """Block ``blk`` of one sample's rows in backward: returns (dy, xhat, rstd, offsets, mask), in fp32."""
        tok = blk * BLOCK_M + tl.arange(0, BLOCK_M)
        row_ok = tok < N
        mask = row_ok[:, None] & col_ok[None, :]
        rows = sample.to(tl.int64) * N + tok
        offs = rows[:, None] * D + cols[None, :]
        dy = tl.load(DY + offs, mask=mask, other=0.0).to(tl.float32)
        x = tl.load(X + offs, mask=mask, other=0.0).to(tl.float32)
        mean = tl.load(MEAN + rows, mask=row_ok, other=0.0)
        rstd = tl.load(RSTD + rows, mask=row_ok, other=0.0)
        xhat = tl.where(mask, (x - mean[:, None]) * rstd[:, None], 0.0)
        return dy, xhat, rstd, offs, mask

    @triton.jit
    def _ln_dx(dxhat, xhat, rstd, D):
        """dL/dx from dL/dxhat: LayerNorm's Jacobian removes the mean of dxhat and its component along xhat."""
        c_mean = tl.sum(dxhat, axis=1) / D
        c_proj = tl.sum(dxhat * xhat, axis=1) / D
        return (dxhat - c_mean[:, None] - xhat * c_proj[:, None]) * rstd[:, None]

    @triton.jit
    def _ln_mod_bwd_kernel(
        DY,
        X,
        W,
        B,
        S,
        MEAN,
        RSTD,
        DX,
        DW_PART,
        DB_PART,
        DS_PART,
        DT_PART,
        N,
        D,
        n_blocks,
        HAS_WEIGHT: tl.constexpr,
        HAS_BIAS: tl.constexpr,
        HAS_MOD: tl.constexpr,
        NEED_DX: tl.constexpr,
        NEED_DW: tl.constexpr,
        NEED_DB: tl.constexpr,
        NEED_DS: tl.constexpr,
        NEED_DT: tl.constexpr,
        BLOCK_M: tl.constexpr,
        BLOCK_D: tl.constexpr,
    ):
        pid = tl.program_id(0)
        n_prog = tl.num_programs(0)
        sample = tl.program_id(1)
        cols = tl.arange(0, BLOCK_D)
        col_ok = cols < D
        if HAS_WEIGHT:
            w = tl.load(W + cols, mask=col_ok, other=0.0).to(tl.float32)
        if HAS_BIAS:
            b = tl.load(B + cols, mask=col_ok, other=0.0).to(tl.float32)
        if HAS_MOD:
            s1 = 1.0 + tl.load(S + sample.to(tl.int64) * D + cols, mask=col_ok, other=0.0).to(tl.float32)
        dw_acc = tl.zeros([BLOCK_D], dtype=tl.float32)
        db_acc = tl.zeros([BLOCK_D], dtype=tl.float32)
        ds_acc = tl.zeros([BLOCK_D], dtype=tl.float32)
        dt_acc = tl.zeros([BLOCK_D], dtype=tl.float32)
        for blk in range(pid, n_blocks, n_prog):
            dy, xhat, rstd, offs, mask = _ln_bwd_rows(DY, X, MEAN, RSTD, sample, blk, N, D, cols, col_ok, BLOCK_M)
            if HAS_MOD:
                dn = dy * s1[None, :]
            else:
                dn = dy
            if HAS_WEIGHT:
                dxhat = dn * w[None, :]
            else:
                dxhat = dn
            if NEED_DX:
                dx = _ln_dx(dxhat, xhat, rstd, D)
                tl.store(DX + offs, dx.to(DX.dtype.element_ty), mask=mask)
            if NEED_DW:
                dw_acc += tl.sum(dn * xhat, axis=0)
            if NEED_DB:
                db_acc += tl.sum(dn, axis=0)
            if NEED_DS:
                n = xhat
                if HAS_WEIGHT:
                    n = n * w[None, :]
                if HAS_BIAS:
                    n = n + b[None, :]
                ds_acc += tl.sum(dy * n, axis=0)
            if NEED_DT:
                dt_acc += tl.sum(dy, axis=0)
        # Partial sums laid out (sample, program, D): torch sums over the program axis afterwards.
        part = (sample.to(tl.int64) * n_prog + pid) * D + cols
        if NEED_DW:
            tl.store(DW_PART + part, dw_acc, mask=col_ok)
        if NEED_DB:
            tl.store(DB_PART + part, db_acc, mask=col_ok)
        if NEED_DS:
            tl.store(DS_PART + part, ds_acc, mask=col_ok)
        if NEED_DT:
            tl.store(DT_PART + part, dt_acc, mask=col_ok)


def _ln_mod_fwd(x3d, weight, bias, scale, shift, eps, out_dtype):
    """Launch the forward kernel on contiguous ``(B, N, D)`` input; returns ``(y, mean, rstd)``."""
    bsz, n, d = x3d.shape
    y = torch.empty((bsz, n, d), dtype=kernel_dtype(out_dtype), device=x3d.device)
    mean = torch.empty((bsz * n,), dtype=torch.float32, device=x3d.device)
    rstd = torch.empty_like(mean)
    if bsz * n == 0:
        return y.to(out_dtype), mean, rstd
    block_d, block_m, num_warps = tile_config(d, n)
    _ln_mod_fwd_kernel[(triton.cdiv(n, block_m), bsz)](
        x3d,
        _or(weight, x3d),
        _or(bias, x3d),
        _or(scale, x3d),
        _or(shift, x3d),
        y,
        mean,
        rstd,
        n,
        d,
        float(eps),
        HAS_WEIGHT=weight is not None,
        HAS_BIAS=bias is not None,
        HAS_MOD=scale is not None,
        BLOCK_M=block_m,
        BLOCK_D=block_d,
        num_warps=num_warps,
    )
    return y.to(out_dtype), mean, rstd


def _ln_mod_bwd(dy, x3d, weight, bias, scale, mean, rstd, needs):
    """Launch the backward kernel; ``needs`` flags which of ``(dx, dw, db, ds, dt)`` to compute.

    Returns them with ``dx`` in x's dtype and the reduced sums in fp32, None where not needed.
    """
    need_dx, need_dw, need_db, need_ds, need_dt = needs
    bsz, n, d = x3d.shape
    block_d, block_m, num_warps = tile_config(d, n)
    n_blocks = triton.cdiv(n, block_m)
    n_prog = reduction_programs(n_blocks, bsz, x3d.device)
    dx = torch.empty(x3d.shape, dtype=kernel_dtype(x3d.dtype), device=x3d.device) if need_dx else None

    def part(flag):
        return torch.zeros((bsz, n_prog, d), dtype=torch.float32, device=x3d.device) if flag else None

    dw_p, db_p, ds_p, dt_p = part(need_dw), part(need_db), part(need_ds), part(need_dt)
    if bsz * n > 0 and any(needs):
        _ln_mod_bwd_kernel[(n_prog, bsz)](
            dy,
            x3d,
            _or(weight, x3d),
            _or(bias, x3d),
            _or(scale, x3d),
            mean,
            rstd,
            _or(dx, x3d),
            _or(dw_p, mean),
            _or(db_p, mean),
            _or(ds_p, mean),
            _or(dt_p, mean),
            n,
            d,
            n_blocks,
            HAS_WEIGHT=weight is not None,
            HAS_BIAS=bias is not None,
            HAS_MOD=scale is not None,
            NEED_DX=need_dx,
            NEED_DW=need_dw,
            NEED_DB=need_db,
            NEED_DS=need_ds,
            NEED_DT=need_dt,
            BLOCK_M=block_m,
            BLOCK_D=block_d,
            num_warps=num_warps,
        )
    dw = dw_p.sum((0, 1)) if need_dw else None
    db = db_p.sum((0, 1)) if need_db else None
    ds = ds_p.sum(1) if need_ds else None
    dt = dt_p.sum(1) if need_dt else None
    return (dx.to(x3d.dtype) if need_dx else None), dw, db, ds, dt


def _or(t, fallback):
    # Kernels take a pointer for every optional operand; a constexpr flag keeps the stand-in unread.
    return t if t is not None else fallback


def _contig(t):
    return t.contiguous() if t is not None else None


class LayerNormModulateFunction(torch.autograd.Function):
    """Autograd wrapper of the fused kernels: ``apply(x, weight, bias, scale, shift, eps, out_dtype)``.

    ``x`` is ``(B, N, D)`` with ``scale``/``shift`` ``(B, D)``, or any ``(..., D)`` with both None.
    """

    @staticmethod
    def forward(ctx, x, weight, bias, scale, shift, eps, out_dtype):
        shape = x.shape
        d = shape[-1]
        # Without modulation every row is alike: treat the tensor as one "sample" of M rows.
        x3d = (x if scale is not None else x.reshape(1, -1, d)).contiguous()
        weight, bias, scale, shift = _contig(weight), _contig(bias), _contig(scale), _contig(shift)
        y, mean, rstd = _ln_mod_fwd(x3d, weight, bias, scale, shift, eps, out_dtype)
        ctx.save_for_backward(x3d, weight, bias, scale, mean, rstd)
        ctx.x_shape = shape
        ctx.shift_dtype = shift.dtype if shift is not None else None
        return y.view(shape)

    @staticmethod
    @once_differentiable
    def backward(ctx, grad_out):
        x3d, weight, bias, scale, mean, rstd = ctx.saved_tensors
        nig = ctx.needs_input_grad
        modulated = scale is not None
        needs = (
            nig[0],
            weight is not None and nig[1],
            bias is not None and nig[2],
            modulated and nig[3],
            modulated and nig[4],
        )
        dy = grad_out.reshape(x3d.shape).contiguous()
        dx, dw, db, ds, dt = _ln_mod_bwd(dy, x3d, weight, bias, scale, mean, rstd, needs)
        return (
            dx.view(ctx.x_shape) if dx is not None else None,
            dw.to(weight.dtype) if dw is not None else None,
            db.to(bias.dtype) if db is not None else None,
            ds.to(scale.dtype) if ds is not None else None,
            dt.to(ctx.shift_dtype) if dt is not None else None,
            None,
            None,
        )


def layernorm_modulate_reference(
    x: torch.Tensor,
    weight: torch.Tensor | None,
    bias: torch.Tensor | None,
    scale: torch.Tensor | None,
    shift: torch.Tensor | None,
    eps: float,
) -> torch.Tensor:
    """LayerNorm over the last dimension, then ``* (1 + scale) + shift`` per sample, in plain PyTorch.

    ``scale``/``shift`` are ``(B, D)`` (one row per sample of a ``(B, N, D)`` input) or both None.
    """
    y = torch.nn.functional.layer_norm(x, (x.shape[-1],), weight, bias, eps)
    if scale is not None:
        assert shift is not None, "give both scale and shift, or neither"
        y = y * (1 + scale[:, None, :]) + shift[:, None, :]
    return y


def _as_rows(t: torch.Tensor, bsz: int, d: int, name: str) -> torch.Tensor:
    """Accept a per-sample modulation row as ``(B, D)`` or ``(B, 1, D)``; anything else is an error."""
    if t.dim() == 3 and t.shape[1] == 1:
        t = t.squeeze(1)
    if tuple(t.shape) != (bsz, d):
        raise ValueError(f"{name} has shape {tuple(t.shape)}; expected ({bsz}, {d}) or ({bsz}, 1, {d})")
    return t


def layernorm_modulate(
    x: torch.Tensor,
    weight: torch.Tensor | None,
    bias: torch.Tensor | None,
    scale: torch.Tensor | None,
    shift: torch.Tensor | None,
    eps: float,
) -> torch.Tensor:
    """Fused ``layer_norm(x, weight, bias, eps) * (1 + scale[:, None]) + shift[:, None]`` (Triton).

    ``x`` is ``(B, N, D)`` with ``scale``/``shift`` of shape ``(B, D)`` or ``(B, 1, D)``; with both
    None it is a plain LayerNorm over any ``(..., D)``. ``weight``/``bias`` are ``(D,)`` or None.
    The output dtype is ``x.dtype`` without modulation, else the promotion of ``x``, ``scale`` and
    ``shift`` (what the reference gives). Gradients come back for every input that requires one,
    each in its own dtype. Raises RuntimeError when Triton cannot run on ``x``'s device.
    """
    require_triton(x.device, "layernorm_modulate")
    if (scale is None) != (shift is None):
        raise ValueError("layernorm_modulate: give both scale and shift, or neither")
    d = x.shape[-1]
    for name, t in (("weight", weight), ("bias", bias)):
        if t is not None and tuple(t.shape) != (d,):
            raise ValueError(f"layernorm_modulate: {name} has shape {tuple(t.shape)}, expected ({d},)")
    out_dtype = x.dtype
    if scale is not None and shift is not None:  # both or neither: checked above
        if x.dim() != 3:
            raise ValueError(f"layernorm_modulate: with scale/shift x must be (B, N, D), got {tuple(x.shape)}")
        scale = _as_rows(scale, x.shape[0], d, "scale")
        shift = _as_rows(shift, x.shape[0], d, "shift")
        out_dtype = torch.promote_types(torch.promote_types(x.dtype, scale.dtype), shift.dtype)
    return LayerNormModulateFunction.apply(x, weight, bias, scale, shift, float(eps), out_dtype)
