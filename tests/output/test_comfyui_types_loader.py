"""LoKr and LoHa adapters exported by ``dit-lora export --format comfyui`` in ComfyUI's own loader, per family.

A tiny diffusers transformer of each family ComfyUI runs that states its ComfyUI model (``comfyui_loader`` in its
tests/families/<package>/cases.py: Wan 2.1, FLUX.2, Z-Image, Qwen-Image; the others load theirs in their own folder) gets PEFT's LoKr
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



def _loaded() -> list[str]:
    """Each registry entry's default name whose family exports ``comfyui`` and states its ``comfyui_loader()``."""
    from family_cases import entry_defaults, has_case

    return [name for name in entry_defaults() if has_case(name, "comfyui_loader")]


def _model(family: str):
    """The family's tiny transformer and ComfyUI's model of the same widths (tests/support/comfyui_cases.py)."""
    from family_cases import case

    return case(family, "comfyui_loader", "tests/output/test_comfyui_types_loader.py")()


def _tiny(family: str) -> torch.nn.Module:
    import diffusers

    name, config = _model(family).transformer
    torch.manual_seed(0)
    return getattr(diffusers, name)(**config).eval()


def _targets(family: str, model: torch.nn.Module) -> list[str]:
    names = [n for n, m in model.named_modules() if isinstance(m, torch.nn.Linear)]
    pattern = _model(family).targets
    return names if pattern is None else [n for n in names if re.match(pattern, n)]


CONFIGS = {
    "lokr_decomposed": lambda: LoKrConfig(r=1, alpha=3, decompose_both=True, init_weights=False),
    "lokr_full": lambda: LoKrConfig(r=8, alpha=12, init_weights=False),
    "loha": lambda: LoHaConfig(r=2, alpha=3, init_weights=False),
}


@pytest.mark.parametrize("kind", list(CONFIGS))
@pytest.mark.parametrize("family", _loaded())
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
    facts = _model(family)
    result = load_in_comfyui(comfy_file, unet_config=facts.unet_config, model_class=facts.model_class)
    assert result.unloaded == [] and result.not_patched == [], (result.unloaded, result.not_patched)
    assert not [w for w in result.warnings if "ERROR" in w or "SHAPE" in w], result.warnings
    assert len(result.targets) == len(targets)  # one ComfyUI module per PEFT layer, all mapped
    by_hand = expected_deltas(exported, result)  # the harness's reading of ComfyUI's formulas agrees with ComfyUI
    for key, want in by_hand.items():
        torch.testing.assert_close(result.deltas[key], want, atol=1e-5, rtol=1e-5, msg=key)
    # ... and ComfyUI's applied update is PEFT's, layer by layer
    seen = {}
    for name in targets:
        comfy_name = facts.comfy_name or (lambda n: f"transformer.{n}")
        target, offset, function = result.targets[comfy_name(name)]
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
    wan = _model("wan")
    for state, matches in ((naive, False), (rescaled, True)):
        result = load_in_comfyui(state, unet_config=wan.unet_config, model_class=wan.model_class, weights=base)
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
    zimage = _model("zimage")
    result = load_in_comfyui(state, unet_config=zimage.unet_config, model_class=zimage.model_class)
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
