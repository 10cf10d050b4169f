"""tests/support/comfyui_loader.py, the harness that loads adapters with ComfyUI's own LoRA loader: the hand-computed
expectation (slices of fused weights, alpha, bias deltas, convolutions) without ComfyUI; with a checkout
(``DIT_LORA_COMFYUI``, marker ``comfyui``) what the worker reports for a file in several LoRA formats, and a model
ComfyUI detects from its weights as it does for a checkpoint."""

from __future__ import annotations

import pytest
import torch
from comfyui_loader import (
    CHECKOUT_ENV,
    ComfyResult,
    comfyui,
    comfyui_checkout,
    expected_deltas,
    load_in_comfyui,
    requires_comfyui,
)


def _result(targets: dict, shapes: dict) -> ComfyResult:
    return ComfyResult(model_class="X", model_base="X", unet_config={}, model_keys=shapes, unloaded=[], not_patched=[],
                       targets=targets, deltas={})


def test_expected_deltas_fill_fused_slices_and_apply_alpha_strength_and_bias():
    g = torch.Generator().manual_seed(0)
    a_q, b_q, a_k, b_k = (torch.randn(s, generator=g) for s in ((2, 4), (4, 2), (2, 4), (4, 2)))
    state = {"q.lora_A.weight": a_q, "q.lora_B.weight": b_q, "k.lora_down.weight": a_k, "k.lora_up.weight": b_k,
             "k.alpha": torch.tensor(1.0), "k.diff_b": torch.ones(4), "conv.diff_b": torch.ones(5), "conv.lora_A.weight": torch.ones(2, 3, 1, 1),
             "conv.lora_B.weight": torch.ones(5, 2, 1, 1), "norm.lora_A.weight": torch.ones(1, 1)}
    targets = {"q": ("qkv.weight", [0, 0, 4], None), "k": ("qkv.weight", [0, 4, 4], None),
               "conv": ("conv.weight", None, None), "norm": ("norm.weight", None, "swap_scale_shift")}
    shapes = {"qkv.weight": [12, 4], "qkv.bias": [12], "conv.weight": [5, 3, 1, 1], "conv.bias": [5], "norm.weight": [8]}
    out = expected_deltas(state, _result(targets, shapes), strength=0.5)
    # a module with a ComfyUI function is skipped; a slice's diff_b names no bias in ComfyUI either
    assert sorted(out) == ["conv.bias", "conv.weight", "qkv.weight"]
    torch.testing.assert_close(out["qkv.weight"][:4], 0.5 * b_q @ a_q)
    torch.testing.assert_close(out["qkv.weight"][4:8], 0.5 * 0.5 * b_k @ a_k)  # alpha 1 / rank 2
    assert not out["qkv.weight"][8:].any()
    torch.testing.assert_close(out["conv.weight"], torch.full((5, 3, 1, 1), 0.5 * 2))
    torch.testing.assert_close(out["conv.bias"], torch.full((5,), 0.5))


def test_expected_deltas_compute_lokr_and_loha_as_comfyui_does():
    """LoKr: kron(w1, w2), a decomposed factor's rank the alpha's divisor; LoHa: (w1_a w1_b) * (w2_a w2_b) into
    a slice, scale 1 without alpha (comfy/weight_adapter/lokr.py, loha.py)."""
    g = torch.Generator().manual_seed(0)
    w1a, w1b, w2 = (torch.randn(s, generator=g) for s in ((2, 1), (1, 2), (3, 2)))
    h = [torch.randn(s, generator=g) for s in ((6, 2), (2, 4), (6, 2), (2, 4))]
    state = {"k.lokr_w1_a": w1a, "k.lokr_w1_b": w1b, "k.lokr_w2": w2, "k.alpha": torch.tensor(2.0)}
    state |= {f"h.hada_{n}": t for n, t in zip(("w1_a", "w1_b", "w2_a", "w2_b"), h)}
    targets = {"k": ("k.weight", None, None), "h": ("qkv.weight", [0, 6, 6], None)}
    out = expected_deltas(state, _result(targets, {"k.weight": [6, 4], "qkv.weight": [12, 4]}))
    torch.testing.assert_close(out["k.weight"], 2.0 * torch.kron(w1a @ w1b, w2))  # alpha 2 / rank 1
    torch.testing.assert_close(out["qkv.weight"][6:], (h[0] @ h[1]) * (h[2] @ h[3]))
    assert not out["qkv.weight"][:6].any()


def test_expected_deltas_refuse_a_lora_of_another_shape():
    state = {"q.lora_A.weight": torch.ones(2, 4), "q.lora_B.weight": torch.ones(3, 2)}
    with pytest.raises(ValueError, match=r"q: B@A has \(3, 4\), ComfyUI's w.weight None \(4, 4\)"):
        expected_deltas(state, _result({"q": ("w.weight", None, None)}, {"w.weight": [4, 4]}))


def test_the_marker_and_a_missing_checkout(monkeypatch, tmp_path):
    assert [m.name for m in comfyui] == ["comfyui", "skipif"]
    assert CHECKOUT_ENV in comfyui[1].kwargs["reason"]
    monkeypatch.setenv(CHECKOUT_ENV, str(tmp_path))
    with pytest.raises(RuntimeError, match="is not a ComfyUI checkout"):
        comfyui_checkout()


#: a tiny ComfyUI Wan 2.1 T2V model (WanModel's constructor arguments)
TINY_WAN = dict(image_model="wan2.1", model_type="t2v", dim=16, num_heads=2, ffn_dim=32, freq_dim=16, text_dim=16,
                in_dim=4, out_dim=4, num_layers=1)


@requires_comfyui
def test_the_worker_reports_what_comfyui_loads_and_applies():
    """Three LoRA formats ComfyUI reads (generic ``diffusion_model.`` with alpha and bias, kohya ``lora_unet_``,
    ``.diff``), one key it does not: reported unloaded; each patched weight's delta is the hand computation."""
    g = torch.Generator().manual_seed(0)
    state = {
        "diffusion_model.blocks.0.self_attn.q.lora_A.weight": torch.randn(2, 16, generator=g),
        "diffusion_model.blocks.0.self_attn.q.lora_B.weight": torch.randn(16, 2, generator=g),
        "diffusion_model.blocks.0.self_attn.q.alpha": torch.tensor(6.0),
        "diffusion_model.blocks.0.self_attn.q.diff_b": torch.randn(16, generator=g),
        "lora_unet_blocks_0_ffn_2.lora_down.weight": torch.randn(2, 32, generator=g),
        "lora_unet_blocks_0_ffn_2.lora_up.weight": torch.randn(16, 2, generator=g),
        "diffusion_model.head.head.diff": torch.randn(16, 16, generator=g),
        "transformer.blocks.0.attn1.to_k.lora_A.weight": torch.randn(2, 16, generator=g),
    }
    result = load_in_comfyui(state, unet_config=TINY_WAN, model_class="WAN21_T2V", strength=0.5)
    assert (result.model_class, result.model_base) == ("WAN21_T2V", "WAN21")
    assert result.unloaded == ["transformer.blocks.0.attn1.to_k.lora_A.weight"] and result.not_patched == []
    assert result.targets["lora_unet_blocks_0_ffn_2"] == ("diffusion_model.blocks.0.ffn.2.weight", None, None)
    assert result.model_keys["diffusion_model.blocks.0.ffn.0.weight"] == [32, 16]
    assert "diffusion_model.blocks.0.cross_attn.o" in result.key_map
    expected = expected_deltas(state, result, strength=0.5)
    expected["diffusion_model.head.head.weight"] = 0.5 * state["diffusion_model.head.head.diff"]
    assert sorted(result.deltas) == sorted(expected)
    for key, want in expected.items():
        torch.testing.assert_close(result.deltas[key], want, atol=1e-6, rtol=1e-5, msg=key)


@requires_comfyui
def test_without_a_config_comfyui_detects_the_model_from_its_weights():
    """As for a checkpoint (``model_detection.model_config_from_unet``): Wan's detection fixes 128-wide heads and a
    256 frequency embedding, so the weights are built at those widths from a first, explicit model's key list."""
    explicit = dict(TINY_WAN, dim=128, num_heads=1, freq_dim=256, text_dim=4096)
    probe = load_in_comfyui({}, unet_config=explicit, model_class="WAN21_T2V")
    weights = {k: torch.zeros(shape) for k, shape in probe.model_keys.items()}
    detected = load_in_comfyui({}, weights=weights)
    assert detected.model_class == "WAN21_T2V" and detected.model_keys == probe.model_keys
    assert {k: detected.unet_config[k] for k in ("dim", "num_heads", "num_layers", "ffn_dim")} == {
        "dim": 128, "num_heads": 1, "num_layers": 1, "ffn_dim": 32}
