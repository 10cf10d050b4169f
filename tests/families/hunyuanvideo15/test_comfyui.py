"""families/hunyuanvideo15/comfyui.py: the ComfyUI-named export of a HunyuanVideo 1.5 adapter.

A LoRA, LoKr and LoHa on every Linear of the tiny HunyuanVideo15Transformer3DModel (alpha != rank, so the fold must
survive; ByT5's width and the two refiner blocks as ComfyUI builds them), written as dit-lora writes it and exported:
ComfyUI's names, each stream's and the refiner's q/k/v fused (LoRA: stacked A and block-diagonal B; LoKr/LoHa: the
fused weight's exact update, ``.diff``), ``norm_out.linear``'s halves swapped back. Loaded by ComfyUI's own
LoraLoader path on its HunyuanVideo15 model (tests/support/comfyui_loader.py, when DIT_LORA_COMFYUI names a ComfyUI
checkout): every tensor consumed, every weight patched by exactly the trained update (PEFT's ``get_delta_weight`` of
the live layers); the diffusers-named file loads nothing there, which is why the export exists."""

from __future__ import annotations

import os

import pytest
import torch
from comfyui_loader import moved_adapter, written_export
from safetensors.torch import load_file

from dit_lora.config import TrainConfig
from dit_lora.families.hunyuanvideo15.comfyui import EXPORT
from dit_lora.families.hunyuanvideo15.demo import DEMO
from dit_lora.modeling import trainables
from dit_lora.output.names import ADAPTER_FILE, PEFT_ADAPTER_FILE

RANK, ALPHA = 4, 8
#: ComfyUI builds ByT5's mapper for 1472 inputs and two refiner blocks, as the real model has
WIDER = {"text_embed_2_dim": 1472, "num_refiner_layers": 2}
#: ComfyUI's HunyuanVideo15 at the tiny model's widths (what model_detection reads from a checkpoint)
COMFY = dict(image_model="hunyuan_video", in_channels=9, out_channels=4, vec_in_dim=None, context_in_dim=32,
             hidden_size=32, mlp_ratio=2.0, num_heads=2, depth=2, depth_single_blocks=0, axes_dim=[4, 6, 6],
             theta=256, patch_size=[1, 1, 1], qkv_bias=True, guidance_embed=False, byt5=True, meanflow=False,
             use_cond_type_embedding=True, vision_in_dim=16, meanflow_sum=True)


def _linears(model) -> list[str]:
    return [n for n, m in model.named_modules() if isinstance(m, torch.nn.Linear)]


def _tiny():
    from diffusers import HunyuanVideo15Transformer3DModel

    torch.manual_seed(0)
    config = {k: v for k, v in DEMO.read().value("transformer").items() if k != "why"}
    return HunyuanVideo15Transformer3DModel(**{**config, **WIDER}).eval()


def _trained(kind: str, targets=None):
    """The tiny transformer with a ``kind`` adapter on ``targets`` (every Linear), every adapter weight moved."""
    model = _tiny()
    return moved_adapter(model, kind, targets or _linears(model), rank=RANK, alpha=ALPHA)


def _written(model, out):
    """The adapter as dit-lora writes it, then its ComfyUI export's file."""
    return written_export(model, out, "hunyuanvideo15", EXPORT)


def _trained_update(model, module: str) -> torch.Tensor:
    """The live layer's update at the trained strength in ComfyUI's row order (norm_out's halves swapped)."""
    update = model.get_submodule(module).get_delta_weight("default").detach().float()
    if module == "norm_out.linear":
        scale, shift = update.chunk(2)
        update = torch.cat([shift, scale])
    return update


def _comfy_place(model, module: str) -> tuple[str, slice]:
    """ComfyUI's weight for the diffusers Linear ``module`` and its rows there (a fused q/k/v: its third)."""
    fused = EXPORT.layout.fused(module)
    if fused is None:
        return f"diffusion_model.{EXPORT.table.rename(module)}.weight", slice(None)
    name, position, _ = fused
    rows = model.get_submodule(module).out_features
    return f"diffusion_model.{name}.weight", slice(position * rows, (position + 1) * rows)


def test_every_linear_has_a_comfyui_name_and_qkv_fuse_per_stream(tmp_path):
    model = _trained("lora")
    state = load_file(str(_written(model, tmp_path)))
    assert all(k.startswith("diffusion_model.") and not k.endswith(".alpha") for k in state)
    for stream in ("img", "txt"):
        a = state[f"diffusion_model.double_blocks.1.{stream}_attn.qkv.lora_A.weight"]
        b = state[f"diffusion_model.double_blocks.1.{stream}_attn.qkv.lora_B.weight"]
        assert a.shape == (3 * RANK, 32) and b.shape == (96, 3 * RANK)
    assert "diffusion_model.txt_in.individual_token_refiner.blocks.1.self_attn.qkv.lora_A.weight" in state
    for module in _linears(_tiny()):
        target, rows = _comfy_place(model, module)
        prefix = target.removesuffix(".weight")
        update = state[f"{prefix}.lora_B.weight"].float() @ state[f"{prefix}.lora_A.weight"].float()
        torch.testing.assert_close(update[rows], _trained_update(model, module), atol=1e-5, rtol=1e-5, msg=module)


@pytest.mark.parametrize("kind", ["lokr", "loha"])
def test_a_lokr_or_loha_exports_qkv_as_the_fused_weights_exact_update(kind, tmp_path):
    model = _trained(kind, targets=["transformer_blocks.0.attn.to_q", "transformer_blocks.0.attn.to_k",
                                    "transformer_blocks.0.attn.to_v", "transformer_blocks.0.ff.net.2"])
    state = load_file(str(_written(model, tmp_path)))
    diff = state["diffusion_model.double_blocks.0.img_attn.qkv.diff"]
    want = torch.cat([_trained_update(model, f"transformer_blocks.0.attn.to_{p}") for p in "qkv"])
    torch.testing.assert_close(diff.float(), want, atol=1e-5, rtol=1e-5)
    suffix = "lokr_w1" if kind == "lokr" else "hada_w1_a"
    assert f"diffusion_model.double_blocks.0.img_mlp.2.{suffix}" in state


def test_a_dora_adapter_is_refused_in_one_paragraph(tmp_path):
    from dit_lora.core.errors import UserError

    model = _tiny()
    trainables.add_adapter(model, TrainConfig(lora_type="dora", rank=RANK).lora,
                           targets=["transformer_blocks.0.attn.to_q"], seed=0)
    with pytest.raises(UserError, match="DoRA"):
        _written(model, tmp_path)


@pytest.mark.comfyui
@pytest.mark.parametrize("kind", ["lora", "lokr", "loha"])
def test_comfyuis_own_loader_applies_every_tensor_at_the_trained_strength(kind, tmp_path):
    comfyui_loader = pytest.importorskip("comfyui_loader", reason="tests/support/comfyui_loader.py (the harness)")
    if not os.environ.get(comfyui_loader.CHECKOUT_ENV):
        pytest.skip(f"needs a ComfyUI checkout: set {comfyui_loader.CHECKOUT_ENV}=<ComfyUI folder>")
    model = _trained(kind)
    comfy_file = _written(model, tmp_path)
    result = comfyui_loader.load_in_comfyui(comfy_file, unet_config=COMFY, model_class="HunyuanVideo15")
    assert result.model_base == "HunyuanVideo15" and result.unloaded == [] and result.not_patched == []
    assert not any("ERROR" in w for w in result.warnings)
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
    if kind == "lora":  # the diffusers file loads nothing there
        plain = comfyui_loader.load_in_comfyui(tmp_path / ADAPTER_FILE, unet_config=COMFY,
                                               model_class="HunyuanVideo15")
        assert plain.deltas == {} and len(plain.unloaded) == len(load_file(str(tmp_path / ADAPTER_FILE)))
    else:
        assert (tmp_path / PEFT_ADAPTER_FILE).is_file()
