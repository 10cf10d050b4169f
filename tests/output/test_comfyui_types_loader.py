"""LoKr and LoHa adapters exported by ``dit-lora export --format comfyui`` in ComfyUI's own loader, per family.

A tiny diffusers transformer of each family ComfyUI runs (Wan 2.1, FLUX.2, Z-Image, Qwen-Image) gets PEFT's LoKr
or LoHa on every Linear (random factors, alpha != r so the folded strength is checked); the adapter is saved as a
run saves it (scale folded in, PEFT's ``adapter_model.safetensors``), exported, and loaded by ComfyUI's ``LoraLoader`` path on
its model of the same widths (tests/support/comfyui_loader.py): every tensor is consumed, nothing is "NOT LOADED",
and each weight's applied update equals PEFT's ``get_delta_weight`` of the layer (FLUX.2 and Z-Image: in its slice
of the fused qkv; FLUX.2's norm_out with its halves swapped). DoRA: ComfyUI's ``dora_scale`` is shown not to be
PEFT's DoRA (why the export refuses it), and a DoRA under PEFT's names loads there as a plain LoRA. Runs where ``DIT_LORA_COMFYUI`` names a ComfyUI checkout (never in CI).
"""

from __future__ import annotations

import re

import pytest
import torch
from comfyui_loader import comfyui, expected_deltas, load_in_comfyui
from peft import LoHaConfig, LoKrConfig, LoraConfig, inject_adapter_in_model
from peft.utils import get_peft_model_state_dict
from safetensors.torch import load_file, save_file

from dit_lora.families.wan.comfyui import comfyui_module as wan_module
from dit_lora.output.adapter import fold_lora_scale
from dit_lora.output.names import PEFT_ADAPTER_FILE
from dit_lora.registry import get_spec

pytestmark = comfyui

#: family -> (diffusers class, its tiny config, ComfyUI's supported_models class, its unet_config of the same widths)
MODELS = {
    "wan": ("WanTransformer3DModel", dict(
        patch_size=(1, 2, 2), num_attention_heads=2, attention_head_dim=8, in_channels=4, out_channels=4, text_dim=16,
        freq_dim=16, ffn_dim=32, num_layers=2, cross_attn_norm=True, qk_norm="rms_norm_across_heads", eps=1e-6,
        rope_max_seq_len=32),
        "WAN21_T2V", dict(image_model="wan2.1", model_type="t2v", dim=16, num_heads=2, ffn_dim=32, freq_dim=16,
                          text_dim=16, in_dim=4, out_dim=4, num_layers=2)),
    "flux2": ("Flux2Transformer2DModel", dict(
        patch_size=1, in_channels=16, out_channels=16, num_layers=1, num_single_layers=1, attention_head_dim=16,
        num_attention_heads=2, joint_attention_dim=16, axes_dims_rope=(4, 4, 4, 4), guidance_embeds=True),
        "Flux2", dict(image_model="flux2", in_channels=16, out_channels=16, vec_in_dim=None, context_in_dim=16,
                      hidden_size=32, mlp_ratio=3.0, num_heads=2, depth=1, depth_single_blocks=1, axes_dim=[4, 4, 4, 4],
                      theta=2000, patch_size=1, qkv_bias=False, guidance_embed=True, txt_ids_dims=[3],
                      global_modulation=True, mlp_silu_act=True, ops_bias=False, default_ref_method="index",
                      ref_index_scale=10.0)),
    "zimage": ("ZImageTransformer2DModel", dict(
        in_channels=4, dim=32, n_layers=2, n_refiner_layers=1, n_heads=2, n_kv_heads=2, cap_feat_dim=16,
        axes_dims=[4, 6, 6], axes_lens=[64, 32, 32]),
        "ZImage", dict(image_model="lumina2", patch_size=2, in_channels=4, dim=32, cap_feat_dim=16, n_layers=2,
                       n_refiner_layers=1, qk_norm=True, n_heads=2, n_kv_heads=2, axes_dims=[4, 6, 6],
                       axes_lens=[64, 32, 32], rope_theta=256.0, ffn_dim_multiplier=8.0 / 3.0, z_image_modulation=True,
                       time_scale=1000.0, multiple_of=1)),
    "qwenimage": ("QwenImageTransformer2DModel", dict(
        patch_size=2, in_channels=16, out_channels=4, num_layers=2, attention_head_dim=16, num_attention_heads=2,
        joint_attention_dim=32, axes_dims_rope=(4, 6, 6)),
        "QwenImage", dict(image_model="qwen_image", in_channels=16, out_channels=4, num_layers=2,
                          attention_head_dim=16, num_attention_heads=2, joint_attention_dim=32,
                          axes_dims_rope=(4, 6, 6))),
}
#: the Z-Image layers tests/families/zimage/test_comfyui_loader.py trains (its LoRA in ComfyUI): all but the
#: timestep MLP
_ZIMAGE = (r".*(attention\.(to_q|to_k|to_v|to_out\.0)|feed_forward\.w[123]|(layers|noise_refiner)\.\d+\."
           r"adaLN_modulation\.0|all_x_embedder\.2-1|all_final_layer\.2-1\.linear|cap_embedder\.1)$")


def _tiny(family: str) -> torch.nn.Module:
    import diffusers

    torch.manual_seed(0)
    return getattr(diffusers, MODELS[family][0])(**MODELS[family][1]).eval()


def _targets(family: str, model: torch.nn.Module) -> list[str]:
    names = [n for n, m in model.named_modules() if isinstance(m, torch.nn.Linear)]
    return [n for n in names if re.match(_ZIMAGE, n)] if family == "zimage" else names


CONFIGS = {
    "lokr_decomposed": lambda: LoKrConfig(r=1, alpha=3, decompose_both=True, init_weights=False),
    "lokr_full": lambda: LoKrConfig(r=8, alpha=12, init_weights=False),
    "loha": lambda: LoHaConfig(r=2, alpha=3, init_weights=False),
}


@pytest.mark.parametrize("kind", list(CONFIGS))
@pytest.mark.parametrize("family", list(MODELS))
def test_comfyui_applies_pefts_update_to_every_weight(family, kind, tmp_path):
    model = _tiny(family)
    targets = _targets(family, model)
    config = CONFIGS[kind]()
    config.target_modules = targets
    inject_adapter_in_model(config, model)
    state, _ = fold_lora_scale(get_peft_model_state_dict(model), config.to_dict())  # as a run saves it
    # the run's file as a LoKr/LoHa run writes it: PEFT's adapter_model.safetensors
    save_file({f"base_model.model.{k}": v.contiguous() for k, v in state.items()}, str(tmp_path / PEFT_ADAPTER_FILE))
    (comfy_file,) = get_spec(family).exports.export_adapter(tmp_path, "comfyui")  # what `dit-lora export` calls
    exported = load_file(str(comfy_file))
    _, _, model_class, unet_config = MODELS[family]
    result = load_in_comfyui(comfy_file, unet_config=unet_config, model_class=model_class)
    assert result.unloaded == [] and result.not_patched == [], (result.unloaded, result.not_patched)
    assert not [w for w in result.warnings if "ERROR" in w or "SHAPE" in w], result.warnings
    assert len(result.targets) == len(targets)  # one ComfyUI module per PEFT layer, all mapped
    by_hand = expected_deltas(exported, result)  # the harness's reading of ComfyUI's formulas agrees with ComfyUI
    for key, want in by_hand.items():
        torch.testing.assert_close(result.deltas[key], want, atol=1e-5, rtol=1e-5, msg=key)
    # ... and ComfyUI's applied update is PEFT's, layer by layer
    seen = {}
    for name in targets:
        target, offset, function = result.targets[_comfy_name(family, name) or f"transformer.{name}"]
        want = model.get_submodule(name).get_delta_weight("default").detach()
        assert want.abs().max() > 1e-3, name
        if function == "swap_scale_shift":  # FLUX.2 norm_out: diffusers' (scale, shift) rows are BFL's (shift, scale)
            want = torch.cat(want.chunk(2)[::-1])
        got = result.deltas[target] if offset is None else result.deltas[target].narrow(*offset)
        torch.testing.assert_close(got, want, atol=1e-5, rtol=1e-5, msg=name)
        seen.setdefault(target, 0)
        seen[target] += got.numel()
    assert sorted(seen) == sorted(result.deltas)  # nothing patched that PEFT's layers do not explain
    assert all(seen[k] == result.deltas[k].numel() for k in seen)  # fused weights: every slice covered


def _comfy_name(family: str, module: str) -> str | None:
    """The ComfyUI module name an export gives ``module`` where it is not the diffusers name (Wan; FLUX.2's BFL)."""
    if family == "wan":
        return f"diffusion_model.{wan_module(module)}"
    if family == "flux2":
        from dit_lora.families.flux2.comfyui import EXPORT

        return EXPORT.typed_layer_name(module)
    return None


def test_comfyuis_dora_scale_is_not_pefts_dora(tmp_path):
    """Why DoRA is refused: PEFT's DoRA on two Wan layers (a square and a non-square one), its magnitude written as
    ComfyUI's ``dora_scale`` (shape (out, 1), the output axis PEFT normalises) next to the LoRA: ComfyUI's update is
    not PEFT's, because it divides by the base weight's row norms. Only a magnitude rescaled by the base weights
    (m * ||W|| / ||W + dW||) would match: a file tied to one base checkpoint and to ComfyUI's current norm."""
    model = _tiny("wan")
    layers = ["blocks.0.attn1.to_q", "blocks.0.ffn.net.0.proj"]
    inject_adapter_in_model(LoraConfig(r=2, lora_alpha=2, use_dora=True, target_modules=layers), model)
    torch.manual_seed(1)
    with torch.no_grad():
        for name in layers:
            layer = model.get_submodule(name)
            layer.lora_B["default"].weight.normal_(std=0.3)
            layer.lora_magnitude_vector["default"].weight.mul_(1.2)
    base = {f"{wan_module(n)}.weight": model.get_submodule(n).base_layer.weight.detach().clone() for n in layers}
    naive, rescaled, peft_delta = {}, {}, {}
    for name in layers:
        layer, key = model.get_submodule(name), f"diffusion_model.{wan_module(name)}"
        w = layer.base_layer.weight.detach().clone()
        a, b = layer.lora_A["default"].weight.detach(), layer.lora_B["default"].weight.detach()
        m = layer.lora_magnitude_vector["default"].weight.detach()
        merged = w + b @ a
        layer.merge()  # PEFT's own DoRA merge: the update it applies
        peft_delta[key] = layer.base_layer.weight.detach() - w
        layer.unmerge()
        torch.testing.assert_close(peft_delta[key], (m / merged.norm(dim=1)).unsqueeze(1) * merged - w)
        eps = torch.finfo(torch.float32).eps
        for out, scale in ((naive, m), (rescaled, m * (w.norm(dim=1) + eps) / merged.norm(dim=1))):
            out.update({f"{key}.lora_A.weight": a, f"{key}.lora_B.weight": b, f"{key}.dora_scale": scale.unsqueeze(1)})
    _, _, model_class, unet_config = MODELS["wan"]
    for state, matches in ((naive, False), (rescaled, True)):
        result = load_in_comfyui(state, unet_config=unet_config, model_class=model_class, weights=base)
        assert result.unloaded == [] and result.not_patched == []
        for key, want in peft_delta.items():
            got = result.deltas[f"{key}.weight"]
            assert torch.allclose(got, want, atol=1e-5, rtol=1e-4) == matches, (key, (got - want).abs().max())


def test_a_dora_file_under_pefts_names_loads_in_comfyui_as_a_plain_lora(tmp_path):
    """Where the diffusers file itself loads in ComfyUI (Z-Image), a DoRA's magnitudes are not loaded ("lora key not
    loaded") and the rest applies as a plain LoRA: not the DoRA PEFT trained (what the card and the refusal say)."""
    model = _tiny("zimage")
    layers = ["layers.0.attention.to_out.0", "layers.0.feed_forward.w1"]
    inject_adapter_in_model(LoraConfig(r=2, lora_alpha=2, use_dora=True, target_modules=layers), model)
    torch.manual_seed(1)
    with torch.no_grad():
        for name in layers:
            model.get_submodule(name).lora_B["default"].weight.normal_(std=0.3)
    state = {f"transformer.{k}": v for k, v in get_peft_model_state_dict(model).items()}
    _, _, model_class, unet_config = MODELS["zimage"]
    result = load_in_comfyui(state, unet_config=unet_config, model_class=model_class)
    assert result.unloaded == sorted(k for k in state if k.endswith("lora_magnitude_vector"))
    for name in layers:
        layer = model.get_submodule(name)
        plain = layer.lora_B["default"].weight @ layer.lora_A["default"].weight
        w = layer.base_layer.weight.detach().clone()
        layer.merge()
        dora = layer.base_layer.weight.detach() - w
        layer.unmerge()
        got = result.deltas[result.targets[f"transformer.{name}"][0]]
        torch.testing.assert_close(got, plain.detach(), atol=1e-5, rtol=1e-5)
        assert (got - dora).abs().max() > 1e-3, name
