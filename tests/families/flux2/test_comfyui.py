"""families/flux2/comfyui.py: the ComfyUI-named export of a FLUX.2 adapter.

A LoRA on every Linear of a tiny Flux2Transformer2DModel (alpha != rank, so the fold into lora_B must survive),
written as dit-lora writes it, exported, and (1) loaded back by diffusers' own converter to the trained output, (2)
loaded by ComfyUI's own LoraLoader path on its Flux2 model (tests/support/comfyui_loader.py, when DIT_LORA_COMFYUI
names a ComfyUI checkout): every tensor consumed, every weight patched by exactly the trained (alpha/r) B·A."""

from __future__ import annotations

import copy
import os
from types import SimpleNamespace

import pytest
import torch
from safetensors.torch import load_file

from dit_lora.core.errors import UserError
from dit_lora.families.flux2.comfyui import EXPORT, SUFFIX, TABLE
from dit_lora.modeling import trainables
from dit_lora.output.adapter import ADAPTER_FILE, write_adapter

RANK, ALPHA = 4, 12.0
#: the tiny transformer and the ComfyUI Flux2 config of the same widths (the harness's announced pair)
TINY = dict(patch_size=1, in_channels=16, out_channels=16, num_layers=1, num_single_layers=1, attention_head_dim=16,
            num_attention_heads=2, joint_attention_dim=16, axes_dims_rope=(4, 4, 4, 4), guidance_embeds=True)
COMFY_FLUX2 = dict(image_model="flux2", in_channels=16, out_channels=16, vec_in_dim=None, context_in_dim=16,
                   hidden_size=32, mlp_ratio=3.0, num_heads=2, depth=1, depth_single_blocks=1, axes_dim=[4, 4, 4, 4],
                   theta=2000, patch_size=1, qkv_bias=False, guidance_embed=True, txt_ids_dims=[3],
                   global_modulation=True, mlp_silu_act=True, ops_bias=False, default_ref_method="index",
                   ref_index_scale=10.0)


def _tiny():
    from diffusers import Flux2Transformer2DModel

    torch.manual_seed(0)
    return Flux2Transformer2DModel(**TINY).eval()


def _linears(model) -> list[str]:
    return [n for n, m in model.named_modules() if isinstance(m, torch.nn.Linear)]


def _inputs() -> dict:
    from dit_lora.families.flux2.loss import latent_ids, text_ids

    g = torch.Generator().manual_seed(1)
    return dict(hidden_states=torch.randn(1, 16, 16, generator=g), encoder_hidden_states=torch.randn(1, 8, 16, generator=g),
                timestep=torch.tensor([0.7]), guidance=torch.tensor([1.0]), img_ids=latent_ids(4, 4, "cpu"),
                txt_ids=text_ids(8, "cpu"), return_dict=False)


def _train_and_save(model, out_dir, targets=None):
    """LoRA on ``targets`` (default: every Linear), non-zero lora_B, written as dit-lora writes it."""
    from dit_lora.registry import get_family

    trainables.add_lora(model, rank=RANK, alpha=ALPHA, dropout=0.0, targets=targets or _linears(model), seed=0)
    with torch.no_grad():
        g = torch.Generator().manual_seed(1)
        for name, param in model.named_parameters():
            if "lora_B" in name:
                param.copy_(torch.randn(param.shape, generator=g) * 0.05)
    lora_state, _ = trainables.split_trainable_state(model, [])
    spec = SimpleNamespace(adapter=get_family("flux2").adapter, adapter_extras=None)
    write_adapter(spec, out_dir, lora_state, model.peft_config["default"].to_dict(), {}, [])


def _run(model):
    with torch.no_grad():
        return model(**_inputs())[0]


def test_the_export_loads_back_in_diffusers_to_the_trained_output(tmp_path):
    """Every Linear but norm_out.linear: diffusers' converter (0.42.1) maps BFL's final_layer.adaLN_modulation.1 to
    norm_out.linear without the shift/scale swap its checkpoint conversion applies, so that one module differs
    there by construction (ComfyUI's own loader checks it below)."""
    from diffusers import Flux2Pipeline

    base, trained = _tiny(), _tiny()
    _train_and_save(trained, tmp_path, [n for n in _linears(trained) if n != "norm_out.linear"])
    want = _run(trained)
    assert (want - _run(base)).abs().max() > 1e-2  # the LoRA changes the output: the comparison can fail
    (comfy_file,) = EXPORT.write(tmp_path)
    assert comfy_file == tmp_path / f"pytorch_lora_weights{SUFFIX}"
    keys = load_file(str(comfy_file)).keys()
    assert all(k.startswith("diffusion_model.") and not k.endswith(".alpha") for k in keys)
    assert "diffusion_model.double_blocks.0.img_attn.qkv.lora_A.weight" in keys
    assert "diffusion_model.single_blocks.0.linear1.lora_B.weight" in keys
    for name in (ADAPTER_FILE, comfy_file.name):
        fresh = copy.deepcopy(base)
        pipe = Flux2Pipeline(scheduler=None, vae=None, text_encoder=None, tokenizer=None, transformer=fresh)
        pipe.load_lora_weights(str(tmp_path), weight_name=name)
        torch.testing.assert_close(_run(fresh), want, atol=1e-5, rtol=1e-5, msg=name)


def test_a_partly_trained_qkv_fuses_with_zero_rows_and_unknown_keys_are_refused():
    a, b = torch.randn(2, 8), torch.randn(8, 2)
    state = EXPORT.comfyui_state({"transformer.transformer_blocks.0.attn.to_k.lora_A.weight": a,
                           "transformer.transformer_blocks.0.attn.to_k.lora_B.weight": b})
    fused_a = state["diffusion_model.double_blocks.0.img_attn.qkv.lora_A.weight"]
    fused_b = state["diffusion_model.double_blocks.0.img_attn.qkv.lora_B.weight"]
    product = fused_b @ fused_a
    assert product.shape == (24, 8) and torch.equal(product[8:16], b @ a) and not product[:8].any()
    with pytest.raises(UserError, match="lora_magnitude"):
        EXPORT.comfyui_state({"transformer.x_embedder.lora_magnitude_vector": torch.ones(2)})
    with pytest.raises(UserError, match="has only lora_A"):
        EXPORT.comfyui_state({"transformer.x_embedder.lora_A.weight": a})


def test_comfyuis_own_loader_applies_every_tensor_at_the_trained_strength(tmp_path):
    comfyui_loader = pytest.importorskip("comfyui_loader", reason="tests/support/comfyui_loader.py (the harness)")
    if not os.environ.get(comfyui_loader.CHECKOUT_ENV):
        pytest.skip(f"needs a ComfyUI checkout: set {comfyui_loader.CHECKOUT_ENV}=<ComfyUI folder>")
    model = _tiny()
    _train_and_save(model, tmp_path)
    (comfy_file,) = EXPORT.write(tmp_path)
    state = load_file(str(comfy_file))
    result = comfyui_loader.load_in_comfyui(comfy_file, unet_config=COMFY_FLUX2, model_class="Flux2")
    assert result.unloaded == [] and result.not_patched == [] and len(result.targets) == len(state) // 2
    expected = comfyui_loader.expected_deltas(state, result)
    assert sorted(expected) == sorted(result.deltas)  # nothing patched that the file does not explain
    for key, want in expected.items():
        torch.testing.assert_close(result.deltas[key], want, atol=1e-5, rtol=1e-5, msg=key)
    for linear in ("single_transformer_blocks.0.attn.to_qkv_mlp_proj", "transformer_blocks.0.ff.linear_in"):
        layer = model.get_submodule(linear)  # the trained strength: the live (unfolded) PEFT factors times alpha/r
        trained = ALPHA / RANK * layer.lora_B["default"].weight.detach() @ layer.lora_A["default"].weight.detach()
        target = result.targets[f"diffusion_model.{TABLE.rename(linear)}"][0]
        torch.testing.assert_close(result.deltas[target], trained, atol=1e-5, rtol=1e-5, msg=linear)
    swapped = "diffusion_model.final_layer.adaLN_modulation.1.weight"  # BFL's (shift, scale) rows
    layer = model.get_submodule("norm_out.linear")  # the trained strength, in diffusers' (scale, shift) order
    trained = ALPHA / RANK * layer.lora_B["default"].weight.detach() @ layer.lora_A["default"].weight.detach()
    scale, shift = trained.chunk(2)
    torch.testing.assert_close(result.deltas[swapped], torch.cat([shift, scale]), atol=1e-5, rtol=1e-5)
    plain = comfyui_loader.load_in_comfyui(tmp_path / ADAPTER_FILE, unet_config=COMFY_FLUX2, model_class="Flux2")
    assert any("single_transformer_blocks.0.attn.to_qkv_mlp_proj" in k for k in plain.unloaded)  # why it exists
