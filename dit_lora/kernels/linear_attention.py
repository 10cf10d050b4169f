"""Sana's ReLU linear attention as one fused Triton kernel per direction.

diffusers' ``SanaLinearAttnProcessor2_0`` computes, for every batch sample and head,

    O_n = KV phi(q_n) / (ks . phi(q_n) + eps),   KV = sum_m v_m phi(k_m)^T,   ks = sum_m phi(k_m)

with ``phi = ReLU`` and everything upcast to fp32. In PyTorch that is a transpose and a copy of
q, k and v into (B, H, Dh, N) layouts, a padded value tensor, two batched matmuls and several
fp32 temporaries of the full sequence length; autograd keeps all of them. Here one program per
(batch, head) streams the tokens twice straight out of the (B, N, H*Dh) projection outputs:

* forward: loop 1 accumulates KV and ks in fp32 registers, loop 2 writes the outputs;
* backward: loop 1 recomputes each output block from the saved KV and ks, writes dq and
  accumulates dKV and dks; loop 2 writes dk and dv.

Only KV and ks (a head-dim square and a vector per head) are saved besides the inputs, so the
memory autograd holds is independent of the sequence length beyond q, k and v themselves.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from dit_lora.kernels.optional_triton import tl, triton
from dit_lora.kernels.triton_launch import at_least_fp32, interpreting, next_power_of_2, triton_usable, wide_tiles

__all__ = [
    "ReLULinearAttentionFunction",
    "relu_linear_attention",
    "relu_linear_attention_reference",
]

# Head dims above this would need KV tiles too large for one program's registers.
MAX_HEAD_DIM = 256
_SUPPORTED_DTYPES = (torch.float32, torch.bfloat16, torch.float16)
# Most tokens in one block under the interpreter's wide tiles (triton_launch.wide_tiles).
_WIDE_TOKENS = 1024


def relu_linear_attention_reference(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, heads: int, eps: float = 1e-15
) -> torch.Tensor:
    """ReLU linear attention exactly as diffusers' ``SanaLinearAttnProcessor2_0`` computes it.

    ``q`` is (B, N, H*Dh), ``k`` and ``v`` are (B, M, H*Dh), each the raw output of its projection.
    The math runs in fp32, with the denominator obtained by padding the values with a row of ones;
    the result is (B, N, H*Dh) in ``q.dtype``.
    """
    dtype = q.dtype
    # Same order of operations as diffusers so the two agree bit for bit on the same device.
    query = q.transpose(1, 2).unflatten(1, (heads, -1))
    key = k.transpose(1, 2).unflatten(1, (heads, -1)).transpose(2, 3)
    value = v.transpose(1, 2).unflatten(1, (heads, -1))
    query = at_least_fp32(F.relu(query))
    key = at_least_fp32(F.relu(key))
    value = F.pad(at_least_fp32(value), (0, 0, 0, 1), mode="constant", value=1.0)
    scores = torch.matmul(value, key)
    out = torch.matmul(scores, query)
    out = out[:, :, :-1] / (out[:, :, -1:] + eps)
    return out.flatten(1, 2).transpose(1, 2).to(dtype)


if triton is not None:

    @triton.jit
    def _relu(x):
        # ``x <= 0`` rather than ``x > 0`` lets NaN through, as torch.relu does.
        return tl.where(x <= 0, 0.0, x)

    @triton.jit
    def _linear_attention_fwd(
        q_ptr,
        k_ptr,
        v_ptr,
        o_ptr,
        kv_ptr,
        ks_ptr,
        n_q,
        n_kv,
        heads,
        head_dim,
        sq_b,
        sq_n,
        sk_b,
        sk_n,
        sv_b,
        sv_n,
        so_b,
        so_n,
        eps,
        BLOCK_N: tl.constexpr,
        BLOCK_D: tl.constexpr,
        PRECISION: tl.constexpr,
    ):
        pid = tl.program_id(0)
        # int64 so batch offsets of long, wide sequences cannot overflow.
        b = (pid // heads).to(tl.int64)
        h = pid % heads
        offs_n = tl.arange(0, BLOCK_N)
        offs_d = tl.arange(0, BLOCK_D)
        mask_d = offs_d < head_dim
        col = h * head_dim + offs_d
        k_base = k_ptr + b * sk_b
        v_base = v_ptr + b * sv_b

        # kv[j, i] = sum_m phi(k_mj) v_mi, i.e. KV transposed, so that outputs are phi(q) @ kv.
        kv = tl.zeros((BLOCK_D, BLOCK_D), dtype=tl.float32)
        ks = tl.zeros((BLOCK_D,), dtype=tl.float32)
        for start in range(0, n_kv, BLOCK_N):
            rows = start + offs_n
            mask = (rows < n_kv)[:, None] & mask_d[None, :]
            # Padded rows and columns load as 0, and ReLU(0) = 0: they add nothing to kv or ks.
            k = tl.load(k_base + rows[:, None] * sk_n + col[None, :], mask=mask, other=0.0).to(tl.float32)
            v = tl.load(v_base + rows[:, None] * sv_n + col[None, :], mask=mask, other=0.0).to(tl.float32)
            kp = _relu(k)
            kv = tl.dot(tl.trans(kp), v, kv, input_precision=PRECISION)
            ks += tl.sum(kp, axis=0)

        # Saved padded to BLOCK_D so backward loads them without masks.
        square = offs_d[:, None] * BLOCK_D + offs_d[None, :]
        tl.store(kv_ptr + pid * BLOCK_D * BLOCK_D + square, kv)
        tl.store(ks_ptr + pid * BLOCK_D + offs_d, ks)

        q_base = q_ptr + b * sq_b
        o_base = o_ptr + b * so_b
        for start in range(0, n_q, BLOCK_N):
            rows = start + offs_n
            mask = (rows < n_q)[:, None] & mask_d[None, :]
            q = tl.load(q_base + rows[:, None] * sq_n + col[None, :], mask=mask, other=0.0).to(tl.float32)
            qp = _relu(q)
            num = tl.dot(qp, kv, input_precision=PRECISION)
            # eps is an fp32 scalar here: 1e-15 is representable, unlike in bf16/fp16 arithmetic.
            den = tl.sum(qp * ks[None, :], axis=1) + eps
            out = num / den[:, None]
            tl.store(o_base + rows[:, None] * so_n + col[None, :], out.to(o_ptr.dtype.element_ty), mask=mask)

    @triton.jit
    def _linear_attention_bwd_q_block(q, do, kv, kv_t, ks, eps, PRECISION: tl.constexpr):
        """One block of query rows in backward: returns (phi(q), dL/dnum, dL/dden, dL/dq)."""
        qp = _relu(q)
        # Recomputing the fp32 output is one small matmul; saving it would cost a (B, N, C)
        # fp32 buffer, and the output in the input dtype is too coarse for dden.
        num = tl.dot(qp, kv, input_precision=PRECISION)
        den = tl.sum(qp * ks[None, :], axis=1) + eps
        out = num / den[:, None]
        dnum = do / den[:, None]
        dden = -tl.sum(do * out, axis=1) / den
        dq = tl.dot(dnum, kv_t, input_precision=PRECISION) + dden[:, None] * ks[None, :]
        dq = tl.where(q <= 0, 0.0, dq)
        return qp, dnum, dden, dq

    @triton.jit
    def _linear_attention_bwd_kv_block(k, v, dkv, dkv_t, dks, PRECISION: tl.constexpr):
        """One block of key/value rows in backward: returns (dL/dk, dL/dv)."""
        kp = _relu(k)
        dv = tl.dot(kp, dkv_t, input_precision=PRECISION)
        dk = tl.dot(v, dkv, input_precision=PRECISION) + dks[None, :]
        dk = tl.where(k <= 0, 0.0, dk)
        return dk, dv

    @triton.jit
    def _linear_attention_bwd(
        q_ptr,
        k_ptr,
        v_ptr,
        do_ptr,
        kv_ptr,
        ks_ptr,
        dq_ptr,
        dk_ptr,
        dv_ptr,
        n_q,
        n_kv,
        heads,
        head_dim,
        sq_b,
        sq_n,
        sk_b,
        sk_n,
        sv_b,
        sv_n,
        sdo_b,
        sdo_n,
        sdq_b,
        sdq_n,
        sdk_b,
        sdk_n,
        sdv_b,
        sdv_n,
        eps,
        BLOCK_N: tl.constexpr,
        BLOCK_D: tl.constexpr,
        PRECISION: tl.constexpr,
    ):
        pid = tl.program_id(0)
        b = (pid // heads).to(tl.int64)
        h = pid % heads
        offs_n = tl.arange(0, BLOCK_N)
        offs_d = tl.arange(0, BLOCK_D)
        mask_d = offs_d < head_dim
        col = h * head_dim + offs_d

        kv_base = kv_ptr + pid * BLOCK_D * BLOCK_D
        kv = tl.load(kv_base + offs_d[:, None] * BLOCK_D + offs_d[None, :])  # kv[j, i] = KV[i, j]
        kv_t = tl.load(kv_base + offs_d[None, :] * BLOCK_D + offs_d[:, None])  # kv_t[i, j] = KV[i, j]
        ks = tl.load(ks_ptr + pid * BLOCK_D + offs_d)

        q_base = q_ptr + b * sq_b
        do_base = do_ptr + b * sdo_b
        dq_base = dq_ptr + b * sdq_b
        # dkv[i, j] = dL/dKV[i, j] = sum_n dnum_ni phi(q_nj)
        dkv = tl.zeros((BLOCK_D, BLOCK_D), dtype=tl.float32)
        dks = tl.zeros((BLOCK_D,), dtype=tl.float32)
        for start in range(0, n_q, BLOCK_N):
            rows = start + offs_n
            mask = (rows < n_q)[:, None] & mask_d[None, :]
            q = tl.load(q_base + rows[:, None] * sq_n + col[None, :], mask=mask, other=0.0).to(tl.float32)
            do = tl.load(do_base + rows[:, None] * sdo_n + col[None, :], mask=mask, other=0.0).to(tl.float32)
            qp, dnum, dden, dq = _linear_attention_bwd_q_block(q, do, kv, kv_t, ks, eps, PRECISION)
            tl.store(dq_base + rows[:, None] * sdq_n + col[None, :], dq.to(dq_ptr.dtype.element_ty), mask=mask)
            dkv = tl.dot(tl.trans(dnum), qp, dkv, input_precision=PRECISION)
            dks += tl.sum(dden[:, None] * qp, axis=0)

        dkv_t = tl.trans(dkv)  # dkv_t[j, i] = dL/dKV[i, j]
        k_base = k_ptr + b * sk_b
        v_base = v_ptr + b * sv_b
        dk_base = dk_ptr + b * sdk_b
        dv_base = dv_ptr + b * sdv_b
        for start in range(0, n_kv, BLOCK_N):
            rows = start + offs_n
            mask = (rows < n_kv)[:, None] & mask_d[None, :]
            k = tl.load(k_base + rows[:, None] * sk_n + col[None, :], mask=mask, other=0.0).to(tl.float32)
            v = tl.load(v_base + rows[:, None] * sv_n + col[None, :], mask=mask, other=0.0).to(tl.float32)
            dk, dv = _linear_attention_bwd_kv_block(k, v, dkv, dkv_t, dks, PRECISION)
            tl.store(dk_base + rows[:, None] * sdk_n + col[None, :], dk.to(dk_ptr.dtype.element_ty), mask=mask)
            tl.store(dv_base + rows[:, None] * sdv_n + col[None, :], dv.to(dv_ptr.dtype.element_ty), mask=mask)


def _launch_config(head_dim: int, tokens: int = 1) -> tuple[int, int, int]:
    """(BLOCK_N, BLOCK_D, num_warps) for a head dim, over sequences of at most ``tokens`` tokens."""
    # tl.dot wants every block dim >= 16; Sana's head dim 32 needs no padding.
    block_d = max(16, next_power_of_2(head_dim))
    if wide_tiles():
        # The interpreter pays per operation, not per element: one block over the whole sequence
        # (as far as _WIDE_TOKENS allows) is cheapest.
        return min(_WIDE_TOKENS, max(16, next_power_of_2(tokens))), block_d, 1
    if interpreting():
        # The GPU's token blocks, so the kernel tests loop over several of them in the interpreter.
        return 64, block_d, 1
    # Two (BLOCK_D x BLOCK_D) fp32 accumulators live in registers; shrink the token block as they grow.
    if block_d <= 64:
        return 64, block_d, 4
    return 32, block_d, 8


def _precision(*tensors: torch.Tensor) -> str:
    # fp32 inputs must stay exact (tf32 would cost ~1e-3 relative); bf16/fp16 values are exact in
    # tf32 and the accumulators are fp32 either way.
    return "ieee" if any(t.dtype == torch.float32 for t in tensors) else "tf32"


def _rows_contiguous(t: torch.Tensor) -> torch.Tensor:
    # The kernels index (b, n, channel) through strides but need unit stride along channels.
    return t if t.stride(-1) == 1 else t.contiguous()


def _check(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, heads: int) -> int:
    if q.dim() != 3 or k.dim() != 3 or v.dim() != 3:
        raise ValueError(
            f"q, k, v must be (B, N, H*Dh); got shapes {tuple(q.shape)}, {tuple(k.shape)}, {tuple(v.shape)}"
        )
    if k.shape != v.shape or q.shape[0] != k.shape[0] or q.shape[2] != k.shape[2]:
        raise ValueError(f"incompatible q, k, v shapes {tuple(q.shape)}, {tuple(k.shape)}, {tuple(v.shape)}")
    if heads <= 0 or q.shape[2] % heads:
        raise ValueError(f"channels {q.shape[2]} are not divisible by heads={heads}")
    head_dim = q.shape[2] // heads
    if head_dim > MAX_HEAD_DIM:
        raise ValueError(f"head dim {head_dim} exceeds the kernel's limit of {MAX_HEAD_DIM}")
    for t in (q, k, v):
        if t.dtype not in _SUPPORTED_DTYPES:
            raise TypeError(f"relu_linear_attention supports float32, bfloat16 and float16, not {t.dtype}")
        if t.device != q.device:
            raise ValueError("q, k and v must be on the same device")
    return head_dim


class ReLULinearAttentionFunction(torch.autograd.Function):
    """Autograd wrapper around the fused forward and backward kernels.

    ``forward(q, k, v, heads, eps)`` takes (B, N, H*Dh) queries and (B, M, H*Dh) keys and values
    and returns (B, N, H*Dh) in ``q.dtype``; gradients come back in each input's dtype.
    """

    @staticmethod
    def forward(ctx, q, k, v, heads: int, eps: float = 1e-15):
        head_dim = _check(q, k, v, heads)
        q, k, v = _rows_contiguous(q), _rows_contiguous(k), _rows_contiguous(v)
        batch, n_q, channels = q.shape
        n_kv = k.shape[1]
        block_n, block_d, num_warps = _launch_config(head_dim, max(n_q, n_kv))
        precision = _precision(q, k, v)
        out = torch.empty((batch, n_q, channels), device=q.device, dtype=q.dtype)
        kv = torch.empty((batch * heads, block_d, block_d), device=q.device, dtype=torch.float32)
        ks = torch.empty((batch * heads, block_d), device=q.device, dtype=torch.float32)
        if out.numel():
            _linear_attention_fwd[(batch * heads,)](
                q,
                k,
                v,
                out,
                kv,
                ks,
                n_q,
                n_kv,
                heads,
                head_dim,
                q.stride(0),
                q.stride(1),
                k.stride(0),
                k.stride(1),
                v.stride(0),
                v.stride(1),
                out.stride(0),
                out.stride(1),
                float(eps),
                BLOCK_N=block_n,
                BLOCK_D=block_d,
                PRECISION=precision,
                num_warps=num_warps,
            )
        ctx.save_for_backward(q, k, v, kv, ks)
        ctx.heads, ctx.eps = heads, float(eps)
        ctx.config = (head_dim, block_n, block_d, num_warps, precision)
        return out

    @staticmethod
    def backward(ctx, grad_out):
        q, k, v, kv, ks = ctx.saved_tensors
        head_dim, block_n, block_d, num_warps, precision = ctx.config
        grad_out = _rows_contiguous(grad_out)
        batch, n_q, _ = q.shape
        n_kv = k.shape[1]
        dq, dk, dv = torch.empty_like(q), torch.empty_like(k), torch.empty_like(v)
        if q.numel() and k.numel():
            _linear_attention_bwd[(batch * ctx.heads,)](
                q,
                k,
                v,
                grad_out,
                kv,
                ks,
                dq,
                dk,
                dv,
                n_q,
                n_kv,
                ctx.heads,
                head_dim,
                q.stride(0),
                q.stride(1),
                k.stride(0),
                k.stride(1),
                v.stride(0),
                v.stride(1),
                grad_out.stride(0),
                grad_out.stride(1),
                dq.stride(0),
                dq.stride(1),
                dk.stride(0),
                dk.stride(1),
                dv.stride(0),
                dv.stride(1),
                ctx.eps,
                BLOCK_N=block_n,
                BLOCK_D=block_d,
                PRECISION=precision,
                num_warps=num_warps,
            )
        else:
            dq.zero_(), dk.zero_(), dv.zero_()
        return dq, dk, dv, None, None


def relu_linear_attention(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, heads: int, eps: float = 1e-15
) -> torch.Tensor:
    """Sana's ReLU linear attention through the fused Triton kernels, differentiable in q, k and v.

    Same contract as :func:`relu_linear_attention_reference`: (B, N, H*Dh) queries, (B, M, H*Dh)
    keys and values, straight out of their projections (any strides with unit channel stride),
    and a (B, N, H*Dh) result in ``q.dtype``. Raises ``RuntimeError`` when Triton cannot run on
    the tensors' device (not installed, or a CPU without ``TRITON_INTERPRET=1``).
    """
    ok, why = triton_usable(q.device)
    if not ok or triton is None:
        raise RuntimeError(f"relu_linear_attention needs Triton: {why or 'Triton is not importable'}")
    return ReLULinearAttentionFunction.apply(q, k, v, heads, eps)
