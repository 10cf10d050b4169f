"""patch_model on real (tiny) diffusers transformers: what it replaces, whole-model parity with LoRA, unpatching.

Batch 3 with a different timestep (and, for Sana, a different caption mask) per sample, so a
kernel that mixed up samples, rows or masks would show here. Triton runs in its CPU interpreter.
"""

from __future__ import annotations

import pytest
import torch
from torch import nn

pytest.importorskip("triton")

from dit_lora.families.cogvideox import kernels as cogvideox_kernels  # noqa: E402
from dit_lora.families.dit import kernels as dit_kernels  # noqa: E402
from dit_lora.families.sana import kernels as sana_kernels  # noqa: E402
from dit_lora.kernels import kernel_counts, kernel_runtime, unpatch_model  # noqa: E402
from dit_lora.kernels import patch_model as _patch_model  # noqa: E402
from dit_lora.modeling.trainables import add_lora  # noqa: E402

DEVICE = "cuda" if torch.cuda.is_available() else "cpu"
POINTS = (*cogvideox_kernels.patch_points(), *sana_kernels.patch_points(), *dit_kernels.patch_points())


def patch_model(model, **kwargs):
    # every family's points at once: each matches its own diffusers classes only
    return _patch_model(model, POINTS, **kwargs)


def _randomise_lora(model: nn.Module, seed: int = 1) -> None:
    # PEFT starts lora_B at zero, which would leave lora_A's gradient zero and untested.
    gen = torch.Generator().manual_seed(seed)
    for name, p in model.named_parameters():
        if "lora_B" in name:
            with torch.no_grad():
                p.copy_(torch.randn(p.shape, generator=gen) * 0.2)


def _cogvideox(dtype):
    from diffusers import CogVideoXTransformer3DModel
    from diffusers.models.embeddings import get_3d_rotary_pos_embed

    from dit_lora.families.cogvideox.demo import get_tiny_cogvideox_config

    torch.manual_seed(0)
    model = CogVideoXTransformer3DModel(**get_tiny_cogvideox_config("t2v", "1.0-5b")["transformer"])
    add_lora(model, rank=4, alpha=8, dropout=0.0, targets=["to_q", "to_k", "to_v", "to_out.0"], seed=0)
    _randomise_lora(model)
    model.to(DEVICE, dtype)
    gen = torch.Generator().manual_seed(2)
    latents = torch.randn(3, 3, 4, 8, 8, generator=gen)  # B, F, C, H, W: 3 x 4 x 4 = 48 video tokens
    text = torch.randn(3, 8, 32, generator=gen)
    rope = get_3d_rotary_pos_embed(embed_dim=16, crops_coords=((0, 0), (4, 4)), grid_size=(4, 4), temporal_size=3)
    inputs = {"hidden_states": latents, "encoder_hidden_states": text, "timestep": torch.tensor([10, 500, 990]),
              "image_rotary_emb": rope}
    return model, _to(inputs, dtype)


def _sana(dtype):
    from diffusers import SanaTransformer2DModel

    from dit_lora.families.sana.demo import get_tiny_sana_config

    torch.manual_seed(0)
    model = SanaTransformer2DModel(**get_tiny_sana_config("tiny")["transformer"])
    add_lora(model, rank=4, alpha=8, dropout=0.0, targets=["to_q", "to_k", "to_v", "to_out.0"], seed=0)
    _randomise_lora(model)
    model.to(DEVICE, dtype)
    gen = torch.Generator().manual_seed(3)
    mask = torch.ones(3, 10)
    mask[1, 6:] = 0  # captions of different lengths: padding must stay masked per sample
    mask[2, 3:] = 0
    inputs = {"hidden_states": torch.randn(3, 4, 8, 8, generator=gen),
              "encoder_hidden_states": torch.randn(3, 10, 48, generator=gen),
              "encoder_attention_mask": mask, "timestep": torch.tensor([20, 400, 980])}
    return model, _to(inputs, dtype)


def _dit(dtype):
    from diffusers import DiTTransformer2DModel

    from dit_lora.families.dit.demo import get_tiny_dit_config

    torch.manual_seed(0)
    from dit_lora.kit import make_peft_capable

    model = make_peft_capable(DiTTransformer2DModel(**get_tiny_dit_config("tiny")["transformer"]))
    add_lora(model, rank=4, alpha=8, dropout=0.0, targets=["to_q", "to_k", "to_v", "to_out.0"], seed=0)
    _randomise_lora(model)
    model.to(DEVICE, dtype)
    gen = torch.Generator().manual_seed(4)
    size = model.config.sample_size
    inputs = {"hidden_states": torch.randn(3, model.config.in_channels, size, size, generator=gen),
              "timestep": torch.tensor([5, 450, 999]), "class_labels": torch.tensor([1, 7, 3])}
    return model, _to(inputs, dtype)


def _to(inputs: dict, dtype) -> dict:
    moved = {}
    for key, value in inputs.items():
        if isinstance(value, torch.Tensor):
            value = value.to(DEVICE, dtype if value.is_floating_point() and key != "encoder_attention_mask" else None)
        elif isinstance(value, tuple):
            value = tuple(v.to(DEVICE) for v in value)
        moved[key] = value
    return moved


BUILDERS = {"cogvideox": _cogvideox, "sana": _sana, "dit": _dit}


def _run(model, inputs, seed=5):
    model.eval()  # DiT drops class labels at random in train mode; gradients flow either way
    model.zero_grad(set_to_none=True)
    out = model(**inputs, return_dict=False)[0]
    cot = torch.randn(out.shape, generator=torch.Generator().manual_seed(seed)).to(out.device, out.dtype)
    (out.float() * cot.float()).sum().backward()
    grads = {n: p.grad.detach().float().clone() for n, p in model.named_parameters() if "lora_" in n}
    assert grads and all(g.abs().sum() > 0 for g in grads.values())
    return out.detach().float(), grads


def _close(a: torch.Tensor, b: torch.Tensor, rtol: float) -> None:
    scale = b.abs().max().clamp_min(1e-6)
    err = (a - b).abs().max()
    assert err <= rtol * scale, f"max |diff| {err:.3g} > {rtol} x {scale:.3g}"


def _l2_close(a: torch.Tensor, b: torch.Tensor, rtol: float) -> None:
    err = float((a - b).norm() / b.norm())
    assert err <= rtol, f"relative L2 difference {err:.3g} > {rtol}"


# Sana's gradients are ill-conditioned through the linear attention's division by q.k sums: scaling the
# reference's modulate output by (1 + 1e-6 noise) moves the tiny model's LoRA gradients by ~10% (L2), the
# kernels by 0.65%. So Sana's gradients are held to 2% L2; CogVideoX and DiT to 1e-3 of the max element.
GRAD_CHECK = {"cogvideox": (_close, 1e-3), "sana": (_l2_close, 2e-2), "dit": (_close, 1e-3)}


@pytest.mark.parametrize("family", ["cogvideox", "sana", "dit"])
def test_patched_model_matches_unpatched_with_lora_fp32(family):
    model, inputs = BUILDERS[family](torch.float32)
    ref_out, ref_grads = _run(model, inputs)
    counts = patch_model(model, kernels="on", attention_backend="math")
    assert counts["modulate"] > 0 and counts["gated_residual"] > 0 and counts["attention"] > 0
    out, grads = _run(model, inputs)
    _close(out, ref_out, 1e-4)
    check, tol = GRAD_CHECK[family]
    for name, g in ref_grads.items():
        check(grads[name], g, tol)
    assert unpatch_model(model) > 0
    again, _ = _run(model, inputs)
    assert torch.equal(again, ref_out)  # unpatched: diffusers' own code, bit for bit


@pytest.mark.parametrize("family", ["cogvideox", "sana"])
def test_patched_bf16_model_is_as_close_to_fp32_as_unpatched_bf16(family):
    # In bf16 the fused ops (fp32 inside, one rounding) are compared with the truth, the same model in fp32:
    # they must be about as close to it as diffusers' own bf16 modules are.
    model, inputs = BUILDERS[family](torch.float32)
    true_out, true_grads = _run(model, inputs)
    model.to(torch.bfloat16)
    inputs = _to(inputs, torch.bfloat16)
    eager_out, eager_grads = _run(model, inputs)
    patch_model(model, kernels="on")
    out, grads = _run(model, inputs)

    def err(a, b):
        return float((a - b).norm() / b.norm())

    assert err(out, true_out) <= 1.5 * err(eager_out, true_out) + 1e-3
    _close(out, eager_out, 5e-2)
    for name, g in true_grads.items():
        assert err(grads[name], g) <= 1.5 * err(eager_grads[name], g) + 1e-2, name


def test_what_gets_patched_is_counted_per_module_class():
    model, _ = _cogvideox(torch.float32)
    counts = patch_model(model, kernels="on")
    layer_norms = sum(type(m) is nn.LayerNorm for m in model.modules())
    blocks = len(model.transformer_blocks)
    assert counts == {"modulate": 2 * blocks, "gated_residual": blocks, "layernorm": layer_norms, "rmsnorm": 0,
                      "linear_attention": 0, "attention": blocks}
    assert kernel_counts(model) == counts
    processors = {type(p).__name__ for p in model.attn_processors.values()}
    assert processors == {"JointAttentionProcessor"}

    sana, _ = _sana(torch.float32)
    counts = patch_model(sana, kernels="on", modulate=False)
    assert counts["modulate"] == counts["gated_residual"] == 0
    assert counts["linear_attention"] == counts["attention"] == len(sana.transformer_blocks)
    kinds = sorted({type(p).__name__ for p in sana.attn_processors.values()})
    assert kinds == ["LinearAttentionProcessor", "SoftmaxAttentionProcessor"]
    unpatch_model(sana)
    kinds = sorted({type(p).__name__ for p in sana.attn_processors.values()})
    assert kinds == ["SanaAttnProcessor2_0", "SanaLinearAttnProcessor2_0"]
    assert kernel_runtime(sana) is None


def test_switches_turn_kernels_off():
    model, _ = _sana(torch.float32)
    assert patch_model(model, kernels="off") == dict.fromkeys(
        ("modulate", "gated_residual", "layernorm", "rmsnorm", "linear_attention", "attention"), 0)
    counts = patch_model(model, kernels="on", linear_attention=False, attention=False, layernorm=False)
    assert counts["linear_attention"] == counts["attention"] == counts["layernorm"] == 0
    assert counts["modulate"] == len(model.transformer_blocks)
    rt = kernel_runtime(model)
    assert rt.enabled["modulate"] and not rt.enabled["linear_attention"]


def test_state_dict_and_lora_keys_are_untouched_by_patching():
    model, _ = _cogvideox(torch.float32)
    before = {k: v.clone() for k, v in model.state_dict().items()}
    patch_model(model, kernels="on")
    after = model.state_dict()
    assert before.keys() == after.keys()
    assert all(torch.equal(before[k], after[k]) for k in before)


def test_patching_before_the_adapters_are_injected_works_the_same():
    from diffusers import CogVideoXTransformer3DModel

    from dit_lora.families.cogvideox.demo import get_tiny_cogvideox_config

    reference, inputs = _cogvideox(torch.float32)
    ref_out, ref_grads = _run(reference, inputs)
    torch.manual_seed(0)
    model = CogVideoXTransformer3DModel(**get_tiny_cogvideox_config("t2v", "1.0-5b")["transformer"])
    patch_model(model, kernels="on", attention_backend="math")  # no LoRA yet
    add_lora(model, rank=4, alpha=8, dropout=0.0, targets=["to_q", "to_k", "to_v", "to_out.0"], seed=0)
    _randomise_lora(model)
    out, grads = _run(model.to(DEVICE), inputs)
    _close(out, ref_out, 1e-4)
    assert grads.keys() == ref_grads.keys()
    for name, g in ref_grads.items():
        _close(grads[name], g, 1e-3)


def test_a_measured_compiled_default_runs_torch_compile_of_the_reference(monkeypatch):
    from dit_lora.kernels import defaults

    device_type = torch.device(DEVICE).type
    monkeypatch.setitem(defaults.MEASURED_DEFAULTS, device_type, {"gated_residual": ("compiled", "a test")})
    model, inputs = _sana(torch.float32)
    ref_out, _ = _run(model, inputs)
    counts = patch_model(model, kernels="auto")
    assert counts["gated_residual"] == len(model.transformer_blocks) and counts["modulate"] == 0
    rt = kernel_runtime(model)
    assert rt.impl == {"gated_residual": "compiled"}
    out, _ = _run(model, inputs)
    _close(out, ref_out, 1e-5)
