"""The generic patch points on the families without points of their own (issue 36: Qwen-Image, Z-Image, FLUX.1,
FLUX.2, ...): which of their modules the fused ops reach, and that the whole (tiny) transformer patched computes what
diffusers' own does, forward and backward. The families come from the registry; each states its tiny transformer's
inputs (``generic_kernel_probe`` in ``tests/families/<package>/cases.py``) or why it has none.

These families declare no patch points of their own (their blocks' modulation and attention are their own code);
what reaches them is the generic points, which patch a library class in any model: plain ``nn.LayerNorm``,
``torch.nn.RMSNorm`` (FLUX.2's q/k norms) and diffusers' ``RMSNorm`` (Qwen-Image's and Z-Image's). Batch 2 with a
different timestep per sample, so a kernel that mixed samples or rows would show. Triton runs in its CPU interpreter.
"""

from __future__ import annotations

import pytest
import torch
from torch import nn

pytest.importorskip("triton")

from diffusers.models.normalization import RMSNorm

from family_cases import case, entry_defaults, has_case

from dit_lora.kernels import patch_model, unpatch_model
from dit_lora.registry import get_family


def _probed() -> list[str]:
    """The registry entries' default names whose family states a ``generic_kernel_probe`` (its cases.py)."""
    return [name for name in entry_defaults() if has_case(name, "generic_kernel_probe")]


def test_every_family_without_points_of_its_own_is_probed_or_says_why_not():
    """Each registry entry whose family declares no patch points states a probe of its transformer for this file, or
    why it has none: a new family is probed here, never silently left out."""
    for name in entry_defaults():
        if get_family(name).kernels is None and not has_case(name, "generic_kernel_probe"):
            reason = case(name, "NO_GENERIC_KERNEL_PROBE", "tests/kernels/test_patch_image_families.py")
            assert len(reason) > 20, (name, reason)  # a reason, not a placeholder


def _expected_counts(model: nn.Module) -> dict[str, int]:
    """What the generic points should reach: every 1-D LayerNorm and RMSNorm (diffusers' without a bias)."""
    layer = sum(type(m) is nn.LayerNorm and len(m.normalized_shape) == 1 for m in model.modules())
    torch_rms = sum(type(m) is nn.RMSNorm and len(m.normalized_shape) == 1 for m in model.modules())
    diffusers_rms = sum(type(m) is RMSNorm and getattr(m, "bias", None) is None for m in model.modules())
    return {"layernorm": layer, "rmsnorm": torch_rms + diffusers_rms}


def _run(model, call, inputs):
    model.zero_grad(set_to_none=True)
    out = call(model, inputs)
    out.backward(torch.randn(out.shape, generator=torch.Generator().manual_seed(2)))
    return out.detach(), {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}


@pytest.mark.parametrize("family", _probed())
def test_the_family_declares_no_points_of_its_own(family):
    assert get_family(family).kernels is None


@pytest.mark.parametrize("family", _probed())
def test_generic_points_reach_every_norm_and_the_patched_model_matches_fp32(family):
    model, inputs, call = case(family, "generic_kernel_probe", "this test")()
    ref_out, ref_grads = _run(model, call, inputs)
    counts = patch_model(model, (), kernels="on", attention_backend="math")
    expected = _expected_counts(model)
    assert expected["rmsnorm"] > 0  # q/k norms in every one of these families
    assert {k: counts[k] for k in expected} == expected
    assert counts["modulate"] == counts["gated_residual"] == counts["linear_attention"] == 0
    out, grads = _run(model, call, inputs)
    torch.testing.assert_close(out, ref_out, rtol=1e-4, atol=1e-5)
    assert set(grads) == set(ref_grads)
    for name, g in ref_grads.items():
        scale = float(g.abs().max()) or 1.0
        torch.testing.assert_close(
            grads[name], g, rtol=1e-3, atol=1e-4 * scale, msg=lambda m, name=name: f"{name}: {m}"
        )
    assert unpatch_model(model) > 0
    again, _ = _run(model, call, inputs)
    assert torch.equal(again, ref_out)  # unpatched: diffusers' own code, bit for bit


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("eps", [1e-6, None])
def test_torch_rmsnorm_point_matches_f_rms_norm_forward_and_backward(dtype, eps):
    # Judged as the kernels' tolerance judges: against the float64 truth, the patched norm may be off by no more
    # than torch's own norm at the same precision (plus a floor).
    gen = torch.Generator().manual_seed(1)
    weight = 1.0 + 0.3 * torch.randn(13, generator=gen)
    x = torch.randn(3, 5, 13, generator=gen)
    cot = torch.randn(3, 5, 13, generator=gen)

    def run(patched: bool, run_dtype: torch.dtype):
        norm = nn.RMSNorm(13, eps=eps if eps is not None else torch.finfo(dtype).eps).to(torch.float64)
        with torch.no_grad():
            norm.weight.copy_(weight)
        norm.to(torch.float64 if run_dtype == torch.float64 else torch.float32)
        if patched:
            assert patch_model(norm, (), kernels="on")["rmsnorm"] == 1
        xin = x.to(run_dtype, copy=True).requires_grad_()
        out = norm(xin)
        assert out.dtype == run_dtype  # F.rms_norm keeps the input's dtype whatever the weight's
        out.backward(cot.to(run_dtype))
        return [t.double() for t in (out, xin.grad, norm.weight.grad)]

    truth = run(False, torch.float64)
    eager, fused = run(False, dtype), run(True, dtype)
    for name, t, e, f in zip(("output", "input grad", "weight grad"), truth, eager, fused):
        err_eager, err_fused = float((e - t).norm() / t.norm()), float((f - t).norm() / t.norm())
        assert err_fused <= 1.5 * err_eager + 1e-6, f"{name}: {err_fused:.3g} vs torch's {err_eager:.3g}"
