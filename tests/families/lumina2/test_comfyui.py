"""families/lumina2/comfyui.py: the ComfyUI-named export of a Lumina 2 adapter.

A LoRA, LoKr and LoHa on every Linear of the tiny Lumina2Transformer2DModel (alpha != rank, so the fold must
survive), written as dit-lora writes it and exported: Lumina 2's own names, q/k/v fused (LoRA: stacked A and
block-diagonal B; LoKr/LoHa: the fused weight's exact update, ``.diff``). Loaded by ComfyUI's own LoraLoader path on
its Lumina2 model (tests/support/comfyui_loader.py, when DIT_LORA_COMFYUI names a ComfyUI checkout): every tensor
consumed, every weight patched by exactly the trained update (PEFT's own ``get_delta_weight`` of the live layers);
the diffusers-named file does not load there, which is why the export exists."""

from __future__ import annotations

import os

import pytest
import torch
from comfyui_loader import moved_adapter, written_export
from safetensors.torch import load_file

from dit_lora.families.lumina2.comfyui import EXPORT
from dit_lora.families.lumina2.demo import get_tiny_lumina2_config
from dit_lora.output.names import ADAPTER_FILE, PEFT_ADAPTER_FILE

RANK, ALPHA = 4, 8
#: ComfyUI's Lumina2 NextDiT at the tiny model's widths (comfy/ldm/lumina/model.py takes these)
COMFY = dict(image_model="lumina2", patch_size=2, in_channels=4, dim=96, cap_feat_dim=48, n_layers=2,
             n_refiner_layers=1, n_heads=6, n_kv_heads=2, multiple_of=32, qk_norm=True, axes_dims=[4, 6, 6],
             axes_lens=[300, 512, 512])


def _linears(model) -> list[str]:
    return [n for n, m in model.named_modules() if isinstance(m, torch.nn.Linear)]


def _tiny():
    from diffusers import Lumina2Transformer2DModel

    torch.manual_seed(0)
    return Lumina2Transformer2DModel(**get_tiny_lumina2_config()["transformer"]).eval()


def _trained(kind: str, targets=None):
    """The tiny transformer with a ``kind`` adapter on ``targets`` (every Linear), every adapter weight moved."""
    model = _tiny()
    return moved_adapter(model, kind, targets or _linears(model), rank=RANK, alpha=ALPHA)


def _written(model, out):
    """The adapter as dit-lora writes it, then its ComfyUI export's file."""
    return written_export(model, out, "lumina2", EXPORT)


def _trained_update(model, module: str) -> torch.Tensor:
    """The live layer's update at the trained strength, as PEFT computes it."""
    return model.get_submodule(module).get_delta_weight("default").detach().float()


def _comfy_place(model, module: str) -> tuple[str, slice]:
    """ComfyUI's weight for the diffusers Linear ``module`` and its rows there (a fused q/k/v: its share)."""
    fused = EXPORT.layout.fused(module)
    if fused is None:
        return f"diffusion_model.{EXPORT.table.rename(module)}.weight", slice(None)
    name, position, shares = fused
    unit = model.get_submodule(module).out_features // shares[position]
    start = sum(shares[:position]) * unit
    return f"diffusion_model.{name}.weight", slice(start, start + shares[position] * unit)


def test_a_lora_exports_fused_qkv_under_lumina2s_own_names(tmp_path):
    model = _trained("lora")
    state = load_file(str(_written(model, tmp_path)))
    assert all(k.startswith("diffusion_model.") and not k.endswith(".alpha") for k in state)
    a, b = state["diffusion_model.layers.0.attention.qkv.lora_A.weight"], state[
        "diffusion_model.layers.0.attention.qkv.lora_B.weight"]
    assert a.shape == (3 * RANK, 96) and b.shape == (96 + 32 + 32, 3 * RANK)  # 6 q heads, 2 k/v heads of 16
    for module in ("layers.0.attn.to_q", "layers.0.attn.to_k", "context_refiner.0.attn.to_v",
                   "noise_refiner.0.feed_forward.linear_2", "norm_out.linear_2", "time_caption_embed.caption_embedder.1"):
        target, rows = _comfy_place(model, module)
        prefix = target.removesuffix(".weight")
        update = state[f"{prefix}.lora_B.weight"].float() @ state[f"{prefix}.lora_A.weight"].float()
        torch.testing.assert_close(update[rows], _trained_update(model, module), atol=1e-5, rtol=1e-5, msg=module)


@pytest.mark.parametrize("kind", ["lokr", "loha"])
def test_a_lokr_or_loha_exports_qkv_as_the_fused_weights_exact_update(kind, tmp_path):
    model = _trained(kind)
    state = load_file(str(_written(model, tmp_path)))
    diff = state["diffusion_model.layers.1.attention.qkv.diff"]
    want = torch.cat([_trained_update(model, f"layers.1.attn.to_{p}") for p in "qkv"])
    torch.testing.assert_close(diff.float(), want, atol=1e-5, rtol=1e-5)
    suffix = "lokr_w1" if kind == "lokr" else "hada_w1_a"
    assert f"diffusion_model.layers.1.feed_forward.w3.{suffix}" in state
    assert not any(".attn." in k or "to_q" in k for k in state)  # q/k/v only inside the fused .diff


def test_a_partly_trained_typed_qkv_leaves_zero_rows(tmp_path):
    model = _trained("lokr", targets=["layers.0.attn.to_k"])
    diff = load_file(str(_written(model, tmp_path)))["diffusion_model.layers.0.attention.qkv.diff"]
    assert diff.shape == (160, 96) and not diff[:96].any() and not diff[128:].any()
    torch.testing.assert_close(diff[96:128].float(), _trained_update(model, "layers.0.attn.to_k"))


@pytest.mark.comfyui
@pytest.mark.parametrize("kind", ["lora", "lokr", "loha"])
def test_comfyuis_own_loader_applies_every_tensor_at_the_trained_strength(kind, tmp_path):
    comfyui_loader = pytest.importorskip("comfyui_loader", reason="tests/support/comfyui_loader.py (the harness)")
    if not os.environ.get(comfyui_loader.CHECKOUT_ENV):
        pytest.skip(f"needs a ComfyUI checkout: set {comfyui_loader.CHECKOUT_ENV}=<ComfyUI folder>")
    model = _trained(kind)
    comfy_file = _written(model, tmp_path)
    result = comfyui_loader.load_in_comfyui(comfy_file, unet_config=COMFY, model_class="Lumina2")
    assert result.model_base == "Lumina2" and result.unloaded == [] and result.not_patched == []
    expected = comfyui_loader.expected_deltas(load_file(str(comfy_file)), result)
    assert sorted(expected) == sorted(result.deltas)  # nothing patched that the file does not explain
    for key, want in expected.items():
        torch.testing.assert_close(result.deltas[key], want, atol=1e-5, rtol=1e-5, msg=key)
    adapted = [n for n, m in model.named_modules() if hasattr(m, "get_delta_weight")]  # PEFT's layers
    assert sorted(adapted) == sorted(_linears(_tiny()))  # every Linear of the model
    for module in adapted:  # ... and every patch is the trained model's own update
        target, rows = _comfy_place(model, module)
        torch.testing.assert_close(result.deltas[target][rows], _trained_update(model, module), atol=1e-5,
                                   rtol=1e-5, msg=module)
    if kind == "lora":  # the diffusers file (what load_lora_weights reads) loads nothing there
        plain = comfyui_loader.load_in_comfyui(tmp_path / ADAPTER_FILE, unet_config=COMFY, model_class="Lumina2")
        assert plain.deltas == {} and len(plain.unloaded) == len(load_file(str(tmp_path / ADAPTER_FILE)))
    else:
        assert (tmp_path / PEFT_ADAPTER_FILE).is_file()
