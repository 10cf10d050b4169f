"""The generic patch points on Qwen-Image, Z-Image, FLUX.1 and FLUX.2 (issue 36): which of their modules the fused ops reach,
and that the whole (tiny) transformer patched computes what diffusers' own does, forward and backward.

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

from dit_lora.kernels import kernel_counts, patch_model, unpatch_model
from dit_lora.registry import get_family


def _flux():
    from dit_lora.kit.packed import latent_ids, pack
    from dit_lora.families.flux.demo import build_tiny_flux_components

    model = build_tiny_flux_components()["transformer"].float()
    gen = torch.Generator().manual_seed(0)
    latents = torch.randn(2, model.config.in_channels // 4, 8, 8, generator=gen)
    inputs = {
        "hidden_states": pack(latents),
        "encoder_hidden_states": torch.randn(2, 5, model.config.joint_attention_dim, generator=gen),
        "pooled_projections": torch.randn(2, model.config.pooled_projection_dim, generator=gen),
        "timestep": torch.tensor([0.3, 0.8]),
        "guidance": torch.tensor([1.0, 1.0]),
        "txt_ids": torch.zeros(5, 3),
        "img_ids": latent_ids(4, 4, "cpu", torch.float32),
    }
    return model, inputs, lambda m, kw: m(**kw, return_dict=False)[0]


def _chroma():
    from dit_lora.families.chroma.demo import build_tiny_chroma_components
    from dit_lora.families.chroma.loss import transformer_mask
    from dit_lora.kit.packed import latent_ids, pack

    model = build_tiny_chroma_components()["transformer"].float()
    gen = torch.Generator().manual_seed(0)
    latents = torch.randn(2, model.config.in_channels // 4, 8, 8, generator=gen)
    caption_mask = torch.arange(5).expand(2, 5) <= torch.tensor([[2], [4]])
    inputs = {
        "hidden_states": pack(latents),
        "encoder_hidden_states": torch.randn(2, 5, model.config.joint_attention_dim, generator=gen),
        "timestep": torch.tensor([0.3, 0.8]),
        "txt_ids": torch.zeros(5, 3),
        "img_ids": latent_ids(4, 4, "cpu", torch.float32),
        "attention_mask": transformer_mask(caption_mask, 16),
    }
    return model, inputs, lambda m, kw: m(**kw, return_dict=False)[0]


def _flux2():
    from dit_lora.families.flux2.demo import build_tiny_flux2_components
    from dit_lora.families.flux2.loss import latent_ids, pack, text_ids

    model = build_tiny_flux2_components("dev")["transformer"].float()
    gen = torch.Generator().manual_seed(0)
    latents = torch.randn(2, model.config.in_channels, 4, 4, generator=gen)
    embeds = torch.randn(2, 5, model.config.joint_attention_dim, generator=gen)
    inputs = {
        "hidden_states": pack(latents),
        "encoder_hidden_states": embeds,
        "timestep": torch.tensor([0.3, 0.8]),
        "guidance": torch.tensor([1.0, 1.0]),
        "txt_ids": text_ids(5, "cpu"),
        "img_ids": latent_ids(4, 4, "cpu"),
    }
    return model, inputs, lambda m, kw: m(**kw, return_dict=False)[0]


def _qwenimage():
    from dit_lora.families.qwenimage.demo import build_tiny_qwenimage_components

    model = build_tiny_qwenimage_components()["transformer"].float()
    gen = torch.Generator().manual_seed(0)
    inputs = {
        "hidden_states": torch.randn(2, 16, model.config.in_channels, generator=gen),
        "encoder_hidden_states": torch.randn(2, 7, model.config.joint_attention_dim, generator=gen),
        "encoder_hidden_states_mask": torch.ones(2, 7, dtype=torch.long),
        "timestep": torch.tensor([0.3, 0.8]),
        "img_shapes": [(1, 4, 4)] * 2,
    }
    return model, inputs, lambda m, kw: m(**kw, return_dict=False)[0]


def _zimage():
    from dit_lora.families.zimage.demo import build_tiny_zimage_components

    model = build_tiny_zimage_components()["transformer"].float()
    gen = torch.Generator().manual_seed(0)
    channels = model.config.in_channels
    inputs = {
        "x": [torch.randn(channels, 1, 16, 16, generator=gen) for _ in range(2)],
        "t": torch.tensor([0.3, 0.8]),
        "cap_feats": [
            torch.randn(7, model.config.cap_feat_dim, generator=gen),
            torch.randn(11, model.config.cap_feat_dim, generator=gen),
        ],
    }
    return model, inputs, lambda m, kw: torch.stack(m(**kw, return_dict=False)[0])


def _lumina2():
    from dit_lora.families.lumina2.demo import build_tiny_lumina2_components

    model = build_tiny_lumina2_components()["transformer"].float()
    gen = torch.Generator().manual_seed(0)
    inputs = {
        "hidden_states": torch.randn(2, model.config.in_channels, 8, 8, generator=gen),
        "timestep": torch.tensor([0.3, 0.8]),
        "encoder_hidden_states": torch.randn(2, 6, model.config.cap_feat_dim, generator=gen),
        "encoder_attention_mask": (torch.arange(6).expand(2, 6) < torch.tensor([[3], [6]])).long(),
    }
    return model, inputs, lambda m, kw: m(**kw, return_dict=False)[0]


def _ideogram4():
    from dit_lora.families.ideogram4.demo import build_tiny_ideogram4_components
    from dit_lora.families.ideogram4.loss import sequence

    model = build_tiny_ideogram4_components()["transformer"].float()
    gen = torch.Generator().manual_seed(0)
    latents = torch.randn(2, model.config.in_channels, 2, 3, generator=gen)
    features = torch.randn(2, 5, model.config.llm_features_dim, generator=gen)
    inputs = {**sequence(latents, features, [3, 5]), "timestep": torch.tensor([0.3, 0.8])}
    return model, inputs, lambda m, kw: m(**kw, return_dict=False)[0]


BUILDERS = {"flux": _flux, "chroma": _chroma, "lumina2": _lumina2, "flux2": _flux2, "qwenimage": _qwenimage, "zimage": _zimage,
            "ideogram4": _ideogram4}


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


@pytest.mark.parametrize("family", sorted(BUILDERS))
def test_the_family_declares_no_points_of_its_own(family):
    assert get_family(family).kernels is None


@pytest.mark.parametrize("family", sorted(BUILDERS))
def test_generic_points_reach_every_norm_and_the_patched_model_matches_fp32(family):
    model, inputs, call = BUILDERS[family]()
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


def test_flux2_qk_norms_are_torch_rmsnorm_patched_by_the_generic_point():
    model, _, _ = _flux2()
    patch_model(model, (), kernels="on")
    norms = [m for name, m in model.named_modules() if name.endswith(("norm_q", "norm_k"))]
    assert norms and all(type(m) is nn.RMSNorm and "forward" in m.__dict__ for m in norms)
    assert kernel_counts(model)["rmsnorm"] == len([m for m in model.modules() if type(m) is nn.RMSNorm])


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


def test_krea2s_own_norms_are_left_as_diffusers_wrote_them():
    """Krea 2's norms are its own ``Krea2RMSNorm`` (a zero-centred scale kept in fp32), no library class: the generic
    points patch nothing and the model computes diffusers' own function, bit for bit (its guide says so)."""
    from dit_lora.families.krea2.demo import build_tiny_krea2_components
    from dit_lora.families.krea2.loss import position_ids

    assert get_family("krea2").kernels is None
    model = build_tiny_krea2_components()["transformer"].float()
    gen = torch.Generator().manual_seed(0)
    config = model.config
    inputs = {
        "hidden_states": torch.randn(2, 16, config.in_channels, generator=gen),
        "encoder_hidden_states": torch.randn(2, 6, config.num_text_layers, config.text_hidden_dim, generator=gen),
        "timestep": torch.tensor([0.3, 0.8]),
        "position_ids": position_ids(6, 4, 4, "cpu"),
        "encoder_attention_mask": torch.arange(6).expand(2, 6) < torch.tensor([[3], [6]]),
    }

    def call(m, kw):
        return m(**kw, return_dict=False)[0]

    ref_out, _ = _run(model, call, inputs)
    counts = patch_model(model, (), kernels="on", attention_backend="math")
    assert sum(counts[k] for k in ("layernorm", "rmsnorm", "modulate", "gated_residual")) == 0
    assert not any(type(m) in (nn.LayerNorm, nn.RMSNorm, RMSNorm) for m in model.modules())
    out, _ = _run(model, call, inputs)
    assert torch.equal(out, ref_out)
