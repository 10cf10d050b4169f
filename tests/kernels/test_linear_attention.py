"""The fused ReLU linear attention kernels against the PyTorch reference and diffusers' Sana processor.

On a CPU the kernels run in Triton's interpreter (conftest sets ``TRITON_INTERPRET=1``), with the
GPU's 64-token blocks (``gpu_tiling``, tests/kernels/conftest.py) so that sequences span several; on a
CUDA machine the same tests run compiled on the GPU.
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest
import torch

pytest.importorskip("triton")

from dit_lora.kernels import linear_attention as la  # noqa: E402
from dit_lora.kernels.linear_attention import (  # noqa: E402
    ReLULinearAttentionFunction,
    relu_linear_attention,
    relu_linear_attention_reference,
)

pytestmark = pytest.mark.usefixtures("gpu_tiling")
DEVICE = "cuda" if torch.cuda.is_available() else "cpu"
EPS = 1e-15
# Kernel vs reference, as a fraction of the magnitude of the terms each result sums.
TOL = {torch.float32: 1e-5, torch.bfloat16: 2e-2, torch.float16: 5e-3}


def _inputs(batch, n, heads, head_dim, dtype, scale=1.0, n_kv=None, seed=0):
    gen = torch.Generator().manual_seed(seed)
    shapes = [(batch, n, heads * head_dim)] + [(batch, n_kv or n, heads * head_dim)] * 2
    return [(torch.randn(s, generator=gen) * scale).to(device=DEVICE, dtype=dtype).requires_grad_() for s in shapes]


def _split(x, heads):
    """(B, N, H*Dh) -> (B, H, N, Dh) in fp64."""
    return x.detach().double().unflatten(-1, (heads, -1)).transpose(1, 2)


def _term_scales(q, k, v, grad_out, heads):
    """Per-result sums of absolute terms, in fp64: the size rounding errors are measured against.

    dq and dk are differences of comparable terms (for one token, dq is exactly ~eps), so their
    own magnitude is no yardstick; the magnitude of what is summed is.
    """
    qp, kp, vv, do = _split(q, heads).relu(), _split(k, heads).relu(), _split(v, heads), _split(grad_out, heads)
    kv = vv.transpose(-1, -2) @ kp                       # (B, H, Dh, Dh), KV[i, j]
    ks = kp.sum(-2)
    den = (qp * ks[..., None, :]).sum(-1, keepdim=True) + EPS
    out = (qp @ kv.transpose(-1, -2)) / den
    dnum = (do / den).abs()
    dden = ((do * out).sum(-1, keepdim=True) / den).abs()
    dkv = dnum.transpose(-1, -2) @ qp                    # |dnum|^T phi(q)
    return {
        "out": (qp @ kv.abs().transpose(-1, -2) / den).max().item(),
        "q": (dnum @ kv.abs() + dden * ks[..., None, :]).max().item(),
        "k": (vv.abs() @ dkv + (dden.transpose(-1, -2) @ qp)).max().item(),
        "v": (kp @ dkv.transpose(-1, -2)).max().item(),
    }


def _run(fn, q, k, v, heads, grad_out):
    out = fn(q, k, v, heads)
    grads = torch.autograd.grad(out, (q, k, v), grad_out)
    return out, grads


def _assert_matches(q, k, v, heads, tol=None, seed=1):
    """Kernel forward and q/k/v gradients equal the reference's within ``tol`` of the term magnitudes."""
    tol = tol or TOL[q.dtype]
    gen = torch.Generator().manual_seed(seed)
    grad_out = torch.randn(q.shape, generator=gen).to(device=q.device, dtype=q.dtype)
    out, grads = _run(relu_linear_attention, q, k, v, heads, grad_out)
    ref, ref_grads = _run(relu_linear_attention_reference, q, k, v, heads, grad_out)
    scales = _term_scales(q, k, v, grad_out, heads)
    assert out.dtype == q.dtype and out.shape == q.shape
    for name, got, want in [("out", out, ref), *zip("qkv", grads, ref_grads)]:
        src = {"q": q, "k": k, "v": v}.get(name)
        if src is not None:
            assert got.dtype == src.dtype, name
        err = (got.double() - want.double()).abs().max().item()
        assert err <= tol * max(scales[name], 1e-30), f"{name}: error {err:.3g} vs scale {scales[name]:.3g}"
    return out, grads


@pytest.mark.parametrize(
    "batch,n,heads,head_dim,dtype",
    [
        (1, 1, 1, 16, torch.float32),
        (2, 37, 2, 20, torch.float32),
        (3, 150, 2, 32, torch.float32),
        (1, 150, 3, 24, torch.float32),
        (2, 1, 2, 32, torch.bfloat16),
        (3, 37, 1, 16, torch.bfloat16),
        (2, 150, 2, 20, torch.bfloat16),
        (1, 37, 2, 32, torch.float16),
    ],
)
def test_matches_reference(batch, n, heads, head_dim, dtype):
    q, k, v = _inputs(batch, n, heads, head_dim, dtype)
    _assert_matches(q, k, v, heads)


def test_cross_attention_lengths():
    # Keys and values may be longer or shorter than the queries.
    for n_q, n_kv in [(37, 150), (150, 20)]:
        q, k, v = _inputs(2, n_q, 2, 16, torch.float32, n_kv=n_kv)
        _assert_matches(q, k, v, 2)


def test_strided_projections_and_expanded_cotangent():
    # q, k, v as views into one fused projection: last dim contiguous, row stride 3C.
    batch, n, heads, head_dim = 2, 70, 2, 32
    gen = torch.Generator().manual_seed(3)
    qkv = torch.randn(batch, n, 3 * heads * head_dim, generator=gen).to(DEVICE).requires_grad_()
    q, k, v = qkv.chunk(3, dim=-1)
    assert not q.is_contiguous() and q.stride(-1) == 1
    out = relu_linear_attention(q, k, v, heads)
    ref = relu_linear_attention_reference(q, k, v, heads)
    torch.testing.assert_close(out, ref, rtol=1e-5, atol=1e-5)
    # .sum() hands backward a stride-0 expanded cotangent.
    (grad,) = torch.autograd.grad(out.sum(), qkv)
    (ref_grad,) = torch.autograd.grad(ref.sum(), qkv)
    torch.testing.assert_close(grad, ref_grad, rtol=1e-4, atol=1e-4 * ref_grad.abs().max().item())


def test_samples_are_independent():
    batch, n, heads, head_dim = 3, 37, 2, 16
    q, k, v = _inputs(batch, n, heads, head_dim, torch.float32, seed=5)
    with torch.no_grad():
        # Give each sample a different scale and sign mix so mixing them up would show.
        for b in range(batch):
            v[b] *= b + 1
            k[b] -= 0.5 * b
        out = relu_linear_attention(q, k, v, heads)
        for b in range(batch):
            alone = relu_linear_attention(q[b:b + 1], k[b:b + 1], v[b:b + 1], heads)
            torch.testing.assert_close(out[b:b + 1], alone, rtol=0, atol=0)
        assert not torch.allclose(out[0], out[1])


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_diffusers_sana_processor(dtype):
    from diffusers.models.attention_processor import Attention, SanaLinearAttnProcessor2_0

    torch.manual_seed(0)
    attn = Attention(query_dim=64, heads=2, dim_head=32, processor=SanaLinearAttnProcessor2_0())
    attn = attn.to(device=DEVICE, dtype=dtype)
    hidden = torch.randn(2, 45, 64, device=DEVICE, dtype=dtype)
    want = attn(hidden)
    want_grad = torch.autograd.grad(want.square().sum(), attn.to_k.weight)[0]

    def path(fn):
        q, k, v = attn.to_q(hidden), attn.to_k(hidden), attn.to_v(hidden)
        return attn.to_out[1](attn.to_out[0](fn(q, k, v, attn.heads)))

    tol = dict(rtol=1e-5, atol=1e-5) if dtype == torch.float32 else dict(rtol=2e-2, atol=2e-2)
    # The reference is diffusers' own math, so it agrees to the last bit.
    torch.testing.assert_close(path(relu_linear_attention_reference), want, rtol=0, atol=0)
    got = path(relu_linear_attention)
    torch.testing.assert_close(got, want, **tol)
    got_grad = torch.autograd.grad(got.square().sum(), attn.to_k.weight)[0]
    scale = want_grad.abs().max().item()
    torch.testing.assert_close(got_grad, want_grad, rtol=tol["rtol"], atol=tol["atol"] * scale)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_large_inputs_stay_finite(dtype):
    # |x| up to ~1e4: KV entries reach ~1e10 and the denominators ~1e12, all fine in fp32.
    q, k, v = _inputs(2, 150, 2, 32, dtype, scale=2.5e3, seed=7)
    assert q.detach().abs().max() > 7e3
    out, grads = _assert_matches(q, k, v, 2)
    assert torch.isfinite(out).all()
    assert all(torch.isfinite(g).all() for g in grads)


@pytest.mark.parametrize("case", ["negative_keys", "all_zero"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_zero_denominator(case, dtype):
    # Every phi(k) is 0, so the denominator is exactly eps; in bf16 arithmetic 1e-15 would be
    # fine but 0/0 elsewhere would not. Output must be exactly 0 like the reference's.
    q, k, v = _inputs(2, 37, 2, 20, dtype, seed=9)
    with torch.no_grad():
        k.copy_(-k.abs() - 0.1)
        if case == "all_zero":
            q.zero_(), k.zero_(), v.zero_()
    grad_out = torch.randn_like(q)
    out, grads = _run(relu_linear_attention, q, k, v, 2, grad_out)
    ref, ref_grads = _run(relu_linear_attention_reference, q, k, v, 2, grad_out)
    assert torch.equal(ref, torch.zeros_like(ref))
    assert torch.equal(out, ref)
    for got, want in zip(grads, ref_grads):
        assert torch.isfinite(got).all()
        torch.testing.assert_close(got.float(), want.float(), rtol=TOL[dtype], atol=TOL[dtype])


@pytest.mark.parametrize("where", ["value", "key"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_nan_propagates_like_reference(where, dtype):
    # A NaN value poisons one output channel of its head; a NaN key (torch.relu keeps NaN) the
    # whole head. A ReLU built on fmax would silently drop the key's NaN.
    q, k, v = _inputs(2, 37, 2, 16, dtype, seed=11)
    x = v if where == "value" else k
    with torch.no_grad():
        x[1, 5, 3] = float("nan")        # head 0 of sample 1
        x[0, 20, 16 + 7] = float("nan")  # head 1 of sample 0
        out = relu_linear_attention(q, k, v, 2)
        ref = relu_linear_attention_reference(q, k, v, 2)
    assert torch.equal(torch.isfinite(out), torch.isfinite(ref))
    assert not torch.isfinite(ref).all() and torch.isfinite(ref).any()
    finite = torch.isfinite(ref)
    torch.testing.assert_close(out[finite].float(), ref[finite].float(), rtol=TOL[dtype], atol=TOL[dtype])


def test_relu_gradient_is_zero_at_exact_zero():
    # torch.relu passes no gradient where its input is exactly 0; neither may the kernel.
    q, k, v = _inputs(2, 37, 2, 16, torch.float32, seed=13)
    with torch.no_grad():
        q[:, ::3, ::2] = 0.0
        k[:, 1::4, 1::3] = 0.0
    dq, dk, _ = _assert_matches(q, k, v, 2)[1]
    assert torch.equal(dq[:, ::3, ::2], torch.zeros_like(dq[:, ::3, ::2]))
    assert torch.equal(dk[:, 1::4, 1::3], torch.zeros_like(dk[:, 1::4, 1::3]))


@pytest.mark.skipif(DEVICE == "cuda", reason="compiled kernels always take the GPU's blocks")
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_wide_interpreter_blocks_differ_and_match_the_reference(dtype, monkeypatch):
    """Training runs' blocks under the interpreter: a whole sequence per block, self- and cross-attention."""
    from dit_lora.kernels import triton_launch

    assert la._launch_config(32, 150)[0] < 150  # gpu_tiling: the tests above loop over several blocks
    monkeypatch.setattr(triton_launch, "WIDE_INTERPRETER_TILES", True)
    assert la._launch_config(32, 150)[0] >= 150
    for n_q, n_kv in [(150, 150), (37, 150)]:
        q, k, v = _inputs(2, n_q, 2, 32, dtype, n_kv=n_kv)
        _assert_matches(q, k, v, 2)
    monkeypatch.setenv("TRITON_INTERPRET", "0")  # compiled: the token count does not matter
    assert {la._launch_config(32, n) for n in (1, 150, 5000)} == {la._launch_config(32)}


def test_function_apply_and_empty_sequence():
    q, k, v = _inputs(1, 16, 1, 16, torch.float32)
    torch.testing.assert_close(ReLULinearAttentionFunction.apply(q, k, v, 1, EPS),
                               relu_linear_attention_reference(q, k, v, 1))
    q0 = torch.zeros(2, 0, 32, device=DEVICE, requires_grad=True)
    out = relu_linear_attention(q0, k.new_zeros(2, 5, 32), v.new_zeros(2, 5, 32), 2)
    assert out.shape == (2, 0, 32)


def test_bad_arguments():
    q, k, v = _inputs(1, 4, 2, 16, torch.float32)
    with pytest.raises(ValueError, match="divisible"):
        relu_linear_attention(q, k, v, 3)
    with pytest.raises(ValueError, match="incompatible"):
        relu_linear_attention(q, k[..., :16], v[..., :16], 2)
    with pytest.raises(TypeError, match="float64"):
        relu_linear_attention(q.double(), k.double(), v.double(), 2)


def test_without_triton(monkeypatch):
    # Load a fresh copy of the module with ``import triton`` failing: it must import, keep the
    # reference working, and refuse the kernel path with a clear error.
    monkeypatch.setitem(sys.modules, "triton", None)
    monkeypatch.setitem(sys.modules, "triton.language", None)
    monkeypatch.delitem(sys.modules, "dit_lora.kernels.optional_triton")  # re-imported, without Triton
    path = Path(la.__file__)
    spec = importlib.util.spec_from_file_location("_la_without_triton", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    assert module.triton is None
    q, k, v = _inputs(1, 4, 1, 16, torch.float32)
    torch.testing.assert_close(module.relu_linear_attention_reference(q, k, v, 1),
                               relu_linear_attention_reference(q, k, v, 1))
    with pytest.raises(RuntimeError, match="Triton"):
        module.relu_linear_attention(q, k, v, 1)


def test_cpu_without_interpreter_refuses(monkeypatch):
    monkeypatch.setenv("TRITON_INTERPRET", "0")
    q, k, v = [t.detach().cpu() for t in _inputs(1, 4, 1, 16, torch.float32)]
    with pytest.raises(RuntimeError, match="TRITON_INTERPRET"):
        relu_linear_attention(q, k, v, 1)
