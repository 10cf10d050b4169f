"""families/qwenimage/comfyui.py: every Linear of Qwen-Image's transformer has a name ComfyUI's QwenImage model
keeps, so any --lora_layers choice exports; other names are refused."""

from __future__ import annotations

import torch

from dit_lora.families.qwenimage.comfyui import EXPORTS, comfyui_module


def test_every_linear_of_the_transformer_is_a_comfyui_module(tiny_qwenimage):
    from diffusers import QwenImageTransformer2DModel

    model = QwenImageTransformer2DModel.from_pretrained(tiny_qwenimage / "transformer")
    linears = [n for n, m in model.named_modules() if isinstance(m, torch.nn.Linear)]
    assert linears and [n for n in linears if not comfyui_module(n)] == []
    assert not comfyui_module("transformer_blocks.0.attn.norm_q") and not comfyui_module("blocks.0.attn.to_q")


def test_every_edit_family_exports_comfyui():
    from dit_lora.registry import get_spec

    for name in ("qwenimage", "qwenimage_edit", "qwenimage_edit_plus"):
        assert get_spec(name).exports is EXPORTS and "comfyui" in EXPORTS.export_formats()
