"""The fused row kernels (LayerNorm+modulation, gated residual, RMSNorm) against their PyTorch references.

On a CPU the kernels run in Triton's interpreter (conftest sets ``TRITON_INTERPRET=1``), so shapes
stay small; token counts are chosen so that one sample spans several row blocks, which is where
per-sample indexing bugs (reading the modulation row of the block instead of the sample) show. These
tests run the GPU's tiling on the interpreter too (``gpu_tiling``, tests/kernels/conftest.py); the
wide tiles training runs take there are checked at the end.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest
import torch

pytest.importorskip("triton", reason="the fused kernels need Triton (pip install 'dit-lora[triton]')")

from dit_lora.kernels.gated_residual import gated_residual, gated_residual_reference  # noqa: E402
from dit_lora.kernels.modulate import layernorm_modulate, layernorm_modulate_reference  # noqa: E402
from dit_lora.kernels.rms_norm import rms_norm, rms_norm_reference  # noqa: E402
from dit_lora.kernels.triton_launch import reduction_programs, tile_config  # noqa: E402

pytestmark = pytest.mark.usefixtures("gpu_tiling")
DEVICE = "cuda" if torch.cuda.is_available() else "cpu"
EPS = 1e-6
# (B, N, D): batch 1/2/3, odd and even hidden sizes, N=40 spans three 16-row blocks per sample.
SHAPES = [(1, 7, 37), (2, 40, 72), (3, 40, 130), (3, 33, 37)]


def _t(*shape, dtype=torch.float32, scale=1.0, seed=0):
    g = torch.Generator().manual_seed(seed)
    return (torch.randn(*shape, generator=g) * scale).to(device=DEVICE, dtype=dtype)


def _cot(shape, dtype):
    # bf16-representable values, so kernel and fp32 reference see the very same cotangent.
    return _t(*shape, dtype=torch.bfloat16, seed=99).to(dtype)


def _run(fn, inputs):
    """``fn(*inputs)`` and the gradients of every tensor input under a fixed random cotangent."""
    leaves = [t.detach().clone().requires_grad_(True) if isinstance(t, torch.Tensor) else t for t in inputs]
    out = fn(*leaves)
    cot = _cot(out.shape, out.dtype)
    wrt = [t for t in leaves if isinstance(t, torch.Tensor)]
    grads = torch.autograd.grad(out, wrt, cot)
    return out.detach(), list(grads)


def _upcast(inputs):
    return [t.float() if isinstance(t, torch.Tensor) else t for t in inputs]


def _assert_close(actual, expected, tol, what=""):
    scale = max(1.0, expected.detach().float().abs().max().item()) if expected.numel() else 1.0
    torch.testing.assert_close(actual.float(), expected.float(), atol=tol * scale, rtol=tol, msg=lambda m: f"{what}: {m}")


def _max_err(a, b):
    return (a.float() - b.float()).abs().max().item()


def _check_fp32(fn, ref, inputs, tol=1e-5):
    out, grads = _run(fn, inputs)
    rout, rgrads = _run(ref, inputs)
    assert out.dtype == rout.dtype and out.shape == rout.shape
    _assert_close(out, rout, tol, "output")
    assert len(grads) == len(rgrads)
    for i, (g, rg) in enumerate(zip(grads, rgrads)):
        assert g.dtype == rg.dtype and g.shape == rg.shape, f"grad {i}: {g.dtype}{tuple(g.shape)}"
        _assert_close(g, rg, tol, f"grad {i}")


def _check_bf16(fn, ref, inputs, tol=2e-2, slack=1.25):
    """bf16 kernel vs the fp32 reference on the same bf16 values, and no worse than the bf16 reference.

    The kernels round once (fp32 math, one cast), so their error should be at most the reference's,
    give or take half a bf16 ulp of the largest value where the fp32 sums land on the other side of a tie.
    """
    out, grads = _run(fn, inputs)
    gold, gold_grads = _run(ref, _upcast(inputs))
    ref_out, ref_grads = _run(ref, inputs)
    assert out.dtype == ref_out.dtype == torch.bfloat16
    for i, (k, g, r) in enumerate(zip([out, *grads], [gold, *gold_grads], [ref_out, *ref_grads])):
        assert k.dtype == r.dtype
        _assert_close(k, g, tol, f"tensor {i} vs fp32")
        mag = max(1.0, g.abs().max().item())
        assert _max_err(k, g) <= slack * _max_err(r, g) + 2.0 ** -9 * mag, f"tensor {i}: worse than the bf16 reference"


def _check_partial_grads(fn, ref, inputs, wanted):
    """Only the inputs at ``wanted`` require grad, and the cotangent is a broadcast (stride-0) tensor."""
    outs = []
    for f in (fn, ref):
        leaves = [t.detach().clone().requires_grad_(i in wanted) if isinstance(t, torch.Tensor) else t
                  for i, t in enumerate(inputs)]
        out = f(*leaves)
        grads = torch.autograd.grad(out.sum(), [leaves[i] for i in wanted])
        outs.append((out.detach(), grads))
    (out, grads), (rout, rgrads) = outs
    _assert_close(out, rout, 1e-5, "output")
    for g, rg in zip(grads, rgrads):
        _assert_close(g, rg, 1e-5, "grad")


def _check_nonfinite(out, ref_out):
    fin = torch.isfinite(out)
    assert torch.equal(fin, torch.isfinite(ref_out)), "non-finite pattern differs from the reference"
    assert not fin.all(), "the test meant to produce non-finite values"
    _assert_close(out[fin], ref_out[fin], 1e-5, "finite entries")


# ----------------------------------------------------------------------------------------------
# LayerNorm + adaLN modulation


def _ln_inputs(b, n, d, affine=True, modulated=True, dtype=torch.float32, x_scale=1.0):
    return [_t(b, n, d, dtype=dtype, scale=x_scale, seed=1),
            _t(d, dtype=dtype, seed=2) * 0.5 + 1 if affine else None,
            _t(d, dtype=dtype, seed=3) * 0.5 if affine else None,
            _t(b, d, dtype=dtype, seed=4) if modulated else None,
            _t(b, d, dtype=dtype, seed=5) if modulated else None,
            EPS]


@pytest.mark.parametrize("affine", [True, False], ids=["affine", "no-affine"])
@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: "x".join(map(str, s)))
def test_layernorm_modulate_fp32(shape, affine):
    _check_fp32(layernorm_modulate, layernorm_modulate_reference, _ln_inputs(*shape, affine=affine))


@pytest.mark.parametrize("affine", [True, False], ids=["affine", "no-affine"])
def test_layernorm_modulate_bf16(affine):
    _check_bf16(layernorm_modulate, layernorm_modulate_reference,
                _ln_inputs(3, 40, 72, affine=affine, dtype=torch.bfloat16))


@pytest.mark.parametrize("affine", [True, False], ids=["affine", "no-affine"])
def test_layernorm_plain_4d(affine):
    """No modulation: a LayerNorm over the heads of a (B, H, N, Dh) tensor."""
    inputs = _ln_inputs(2, 3 * 10, 24, affine=affine, modulated=False)
    inputs[0] = inputs[0].view(2, 3, 10, 24)
    _check_fp32(layernorm_modulate, layernorm_modulate_reference, inputs)


def test_layernorm_modulate_each_sample_uses_its_own_row():
    """Sample 2 of a batch gives what sample 2 alone gives (the adaLN row-indexing bug would not)."""
    b, n, d = 3, 40, 37
    assert n > tile_config(d)[1], "each sample must span more than one row block"
    x, w, bias, s, t, eps = _ln_inputs(b, n, d)
    assert _max_err(s[0], s[2]) > 0.5 and _max_err(t[0], t[2]) > 0.5
    out, grads = _run(layernorm_modulate, [x, w, bias, s, t, eps])
    for i in range(b):
        one = [x[i:i + 1], w, bias, s[i:i + 1], t[i:i + 1], eps]
        leaves = [v.detach().clone().requires_grad_(True) if isinstance(v, torch.Tensor) else v for v in one]
        alone = layernorm_modulate(*leaves)
        cot = _cot((b, n, d), torch.float32)[i:i + 1]  # the batch's cotangent rows for this sample
        gx, gs, gt = torch.autograd.grad(alone, [leaves[0], leaves[3], leaves[4]], cot)
        _assert_close(out[i], alone[0].detach(), 1e-6, f"sample {i} output")
        _assert_close(grads[0][i], gx[0], 1e-6, f"sample {i} dx")
        _assert_close(grads[3][i], gs[0], 1e-5, f"sample {i} dscale")
        _assert_close(grads[4][i], gt[0], 1e-5, f"sample {i} dshift")
    # With sample 0's modulation row, sample 2 would come out differently: the check has teeth.
    wrong = layernorm_modulate_reference(x[2:3], w, bias, s[0:1], t[0:1], eps)
    assert _max_err(wrong[0], out[2]) > 0.1


def test_layernorm_modulate_non_contiguous_and_partial_grads():
    x, w, bias, s, t, eps = _ln_inputs(2, 40, 72)
    x = x.transpose(0, 1).contiguous().transpose(0, 1)  # same values, non-contiguous layout
    assert not x.is_contiguous()
    _check_partial_grads(layernorm_modulate, layernorm_modulate_reference, [x, w, bias, s, t, eps], wanted=[3, 4])
    _check_partial_grads(layernorm_modulate, layernorm_modulate_reference, [x, w, bias, s, t, eps], wanted=[1])


def test_layernorm_modulate_large_values():
    inputs = _ln_inputs(2, 40, 72, x_scale=1e4 / 4)
    inputs[0][0, 0, 0] = 1e4
    out, _ = _run(layernorm_modulate, inputs)
    assert torch.isfinite(out).all()
    _check_fp32(layernorm_modulate, layernorm_modulate_reference, inputs)


@pytest.mark.filterwarnings("ignore:invalid value:RuntimeWarning")
@pytest.mark.parametrize("modulated", [True, False], ids=["modulated", "plain"])
def test_layernorm_modulate_nan_inf_like_reference(modulated):
    x, w, bias, s, t, eps = _ln_inputs(2, 40, 37, modulated=modulated)
    x[0, 3, 5] = float("nan")
    x[1, 20, 0] = float("inf")
    x[1, 30, 7] = float("-inf")
    _check_nonfinite(layernorm_modulate(x, w, bias, s, t, eps), layernorm_modulate_reference(x, w, bias, s, t, eps))


def test_layernorm_modulate_shapes_and_dtypes():
    """(B, 1, D) modulation rows are accepted; output promotes like the reference; grads keep dtypes."""
    x, w, bias, s, t, eps = _ln_inputs(2, 20, 37, dtype=torch.bfloat16)
    s32, t32 = s.float()[:, None, :], t.float()[:, None, :]
    out, grads = _run(layernorm_modulate, [x, w, bias, s32, t32, eps])
    ref = layernorm_modulate_reference(x.float(), w.float(), bias.float(), s32[:, 0], t32[:, 0], eps)
    assert out.dtype == torch.float32
    _assert_close(out, ref, 2e-2, "output")
    assert [g.dtype for g in grads] == [torch.bfloat16] * 3 + [torch.float32] * 2
    assert grads[3].shape == s32.shape
    with pytest.raises(ValueError, match="both"):
        layernorm_modulate(x, w, bias, s, None, eps)
    with pytest.raises(ValueError, match="expected"):
        layernorm_modulate(x, w, bias, s[:1], t[:1], eps)


# ----------------------------------------------------------------------------------------------
# Gated residual


def _gr_inputs(b, n, d, dtype=torch.float32, scale=1.0):
    return [_t(b, n, d, dtype=dtype, scale=scale, seed=11), _t(b, d, dtype=dtype, seed=12),
            _t(b, n, d, dtype=dtype, scale=scale, seed=13)]


@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: "x".join(map(str, s)))
def test_gated_residual_fp32(shape):
    _check_fp32(gated_residual, gated_residual_reference, _gr_inputs(*shape))


def test_gated_residual_bf16():
    _check_bf16(gated_residual, gated_residual_reference, _gr_inputs(3, 40, 130, dtype=torch.bfloat16))


def test_gated_residual_each_sample_uses_its_own_gate():
    b, n, d = 3, 40, 72
    assert n > tile_config(d)[1], "each sample must span more than one row block"
    r, g, y = _gr_inputs(b, n, d)
    out, grads = _run(gated_residual, [r, g, y])
    for i in range(b):
        cot = _cot((b, n, d), torch.float32)[i:i + 1]
        leaves = [v[i:i + 1].clone().requires_grad_(True) for v in (r, g, y)]
        alone = gated_residual(*leaves)
        _, dg, dy = torch.autograd.grad(alone, leaves, cot)
        _assert_close(out[i], alone[0].detach(), 1e-6, f"sample {i} output")
        _assert_close(grads[1][i], dg[0], 1e-5, f"sample {i} dgate")
        _assert_close(grads[2][i], dy[0], 1e-6, f"sample {i} dy")
    assert _max_err(gated_residual_reference(r[2:3], g[0:1], y[2:3])[0], out[2]) > 0.1


@pytest.mark.filterwarnings("ignore:invalid value:RuntimeWarning")
def test_gated_residual_large_and_nonfinite():
    r, g, y = _gr_inputs(2, 40, 37, scale=1e4 / 4)
    _check_fp32(gated_residual, gated_residual_reference, [r, g, y])
    y[0, 3, 5] = float("nan")
    r[1, 20, 0] = float("inf")
    g[1, 7] = float("-inf")
    _check_nonfinite(gated_residual(r, g, y), gated_residual_reference(r, g, y))


def test_gated_residual_partial_grads():
    r, g, y = _gr_inputs(2, 40, 72)
    y_strided = y.transpose(0, 1).contiguous().transpose(0, 1)  # same values, non-contiguous layout
    _check_partial_grads(gated_residual, gated_residual_reference, [r, g, y_strided], wanted=[1])
    _check_partial_grads(gated_residual, gated_residual_reference, [r, g, y], wanted=[2])


def test_gated_residual_mixed_dtypes():
    """fp32 residual stream with a bf16 branch: fp32 out (as the reference), grads in each dtype."""
    r, g, y = _gr_inputs(2, 20, 37)
    g, y = g.bfloat16(), y.bfloat16()
    out, grads = _run(gated_residual, [r, g[:, None, :], y])
    assert out.dtype == torch.float32
    _assert_close(out, gated_residual_reference(r, g.float(), y.float()), 1e-5, "output")
    assert [t.dtype for t in grads] == [torch.float32, torch.bfloat16, torch.bfloat16]
    assert grads[1].shape == (2, 1, 37)


# ----------------------------------------------------------------------------------------------
# RMSNorm


def _rms_inputs(shape, weight=True, dtype=torch.float32, scale=1.0):
    return [_t(*shape, dtype=dtype, scale=scale, seed=21), _t(shape[-1], dtype=dtype, seed=22) if weight else None, EPS]


@pytest.mark.parametrize("weight", [True, False], ids=["weight", "no-weight"])
@pytest.mark.parametrize("shape", SHAPES + [(2, 3, 10, 24)], ids=lambda s: "x".join(map(str, s)))
def test_rms_norm_fp32(shape, weight):
    _check_fp32(rms_norm, rms_norm_reference, _rms_inputs(shape, weight))


@pytest.mark.parametrize("weight", [True, False], ids=["weight", "no-weight"])
def test_rms_norm_bf16(weight):
    _check_bf16(rms_norm, rms_norm_reference, _rms_inputs((3, 40, 130), weight, dtype=torch.bfloat16))


def test_rms_norm_out_dtype():
    """bf16 input normalised straight into fp32 (the attention q/k norm case); dx stays bf16."""
    x, w, eps = _rms_inputs((2, 40, 72), dtype=torch.bfloat16)
    f = lambda x, w: rms_norm(x, w, eps, torch.float32)  # noqa: E731
    out, grads = _run(f, [x, w])
    ref, ref_grads = _run(lambda x, w: rms_norm_reference(x, w, eps, torch.float32), [x.float(), w.float()])
    assert out.dtype == torch.float32 and [g.dtype for g in grads] == [torch.bfloat16] * 2
    _assert_close(out, ref, 1e-5, "output")
    for g, rg in zip(grads, ref_grads):
        _assert_close(g, rg, 2e-2, "grad")


def test_rms_norm_partial_grads():
    x, w, eps = _rms_inputs((2, 40, 72))
    x_strided = x.transpose(0, 1).contiguous().transpose(0, 1)  # clone() in the check keeps these strides
    _check_partial_grads(rms_norm, rms_norm_reference, [x_strided, w, eps], wanted=[1])
    _check_partial_grads(rms_norm, rms_norm_reference, [x, w, eps], wanted=[0])


@pytest.mark.filterwarnings("ignore:invalid value:RuntimeWarning")
def test_rms_norm_large_and_nonfinite():
    x, w, eps = _rms_inputs((2, 40, 37), scale=1e4 / 4)
    _check_fp32(rms_norm, rms_norm_reference, [x, w, eps])
    x[0, 3, 5] = float("nan")
    x[1, 20, 0] = float("inf")
    _check_nonfinite(rms_norm(x, w, eps), rms_norm_reference(x, w, eps))


# ----------------------------------------------------------------------------------------------
# The wide tiles training runs take under the interpreter


def _wide_cases(b, n, d):
    """name -> (kernel, reference, inputs(dtype), rows of one launch's sample)."""
    return {
        "layernorm_modulate": (layernorm_modulate, layernorm_modulate_reference,
                               lambda dt: _ln_inputs(b, n, d, dtype=dt), n),
        "layernorm": (layernorm_modulate, layernorm_modulate_reference,
                      lambda dt: _ln_inputs(b, n, d, modulated=False, dtype=dt), b * n),
        "gated_residual": (gated_residual, gated_residual_reference, lambda dt: _gr_inputs(b, n, d, dtype=dt), n),
        "rms_norm": (rms_norm, rms_norm_reference, lambda dt: _rms_inputs((b, n, d), dtype=dt), b * n),
    }


@pytest.mark.skipif(DEVICE == "cuda", reason="compiled kernels always take the GPU tiling")
@pytest.mark.parametrize("kernel", list(_wide_cases(1, 1, 1)))
def test_wide_interpreter_tiles_differ_and_match_the_reference(kernel, monkeypatch):
    """Training runs' tiling under the interpreter: one tile per sample, one backward program; fp32 and bf16."""
    from dit_lora.kernels import triton_launch

    b, n, d = 3, 40, 72
    fn, ref, inputs, rows = _wide_cases(b, n, d)[kernel]
    launches = []
    for wide in (False, True):
        monkeypatch.setattr(triton_launch, "WIDE_INTERPRETER_TILES", wide)
        block_m = tile_config(d, rows)[1]
        launches.append((block_m, reduction_programs(-(-rows // block_m), b, torch.device(DEVICE))))
    (gpu_rows, gpu_programs), (wide_rows, wide_programs) = launches
    assert gpu_rows < rows and gpu_programs == 2, "the unit tests above run several blocks and programs"
    assert wide_rows >= rows and wide_programs == 1, "wide tiles take a sample's rows in one program"
    _check_fp32(fn, ref, inputs(torch.float32))
    _check_bf16(fn, ref, inputs(torch.bfloat16))


def test_compiled_tiling_ignores_the_interpreter_setting(monkeypatch):
    """Without the interpreter the tiles depend on the hidden size alone, wide setting or not (GPU launches)."""
    from dit_lora.kernels import triton_launch

    monkeypatch.setenv("TRITON_INTERPRET", "0")
    for wide in (False, True):
        monkeypatch.setattr(triton_launch, "WIDE_INTERPRETER_TILES", wide)
        assert not triton_launch.wide_tiles()
        for d in (37, 72, 130, 3072):
            assert {tile_config(d, rows) for rows in (1, 40, 5000)} == {tile_config(d)}
    monkeypatch.setenv("TRITON_INTERPRET", "1")
    assert triton_launch.wide_tiles()
    assert tile_config(72, 5000)[1] > tile_config(72)[1]


# ----------------------------------------------------------------------------------------------
# When Triton cannot run


@pytest.mark.skipif(DEVICE == "cuda", reason="on CUDA the kernels always run")
def test_cpu_without_interpreter_raises(monkeypatch):
    monkeypatch.setenv("TRITON_INTERPRET", "0")
    x = torch.randn(2, 4, 8)
    with pytest.raises(RuntimeError, match="TRITON_INTERPRET"):
        rms_norm(x, None, EPS)
    with pytest.raises(RuntimeError, match="TRITON_INTERPRET"):
        gated_residual(x, x[:, 0], x)


def test_modules_import_without_triton():
    """The references import and run without Triton; the fused functions say why they cannot."""
    code = textwrap.dedent("""
        import sys
        sys.modules["triton"] = None  # makes `import triton` raise ImportError
        import torch
        from dit_lora.kernels.modulate import layernorm_modulate, layernorm_modulate_reference
        from dit_lora.kernels.gated_residual import gated_residual_reference
        from dit_lora.kernels.rms_norm import rms_norm_reference
        x = torch.randn(2, 3, 8)
        layernorm_modulate_reference(x, None, None, x[:, 0], x[:, 1], 1e-6)
        gated_residual_reference(x, x[:, 0], x)
        rms_norm_reference(x, None, 1e-6)
        try:
            layernorm_modulate(x, None, None, None, None, 1e-6)
        except RuntimeError as e:
            print("RAISED", e)
    """)
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert res.returncode == 0, res.stderr
    assert "RAISED" in res.stdout and "not installed" in res.stdout
