"""families/zimage/comfyui.py: every Linear of Z-Image's transformer has a name ComfyUI's key map knows, so any
--lora_layers choice exports; other names are refused."""

from __future__ import annotations

import torch

from dit_lora.families.zimage.comfyui import EXPORTS, comfyui_module


def test_every_linear_of_the_transformer_is_a_comfyui_module(tiny):
    linears = [n for n, m in tiny["transformer"].named_modules() if isinstance(m, torch.nn.Linear)]
    assert linears and [n for n in linears if not comfyui_module(n)] == []
    assert not comfyui_module("layers.0.attention.norm_q") and not comfyui_module("x_layers.0.attention.to_q")


def test_the_spec_exports_comfyui():
    from dit_lora.registry import get_spec

    assert get_spec("zimage").exports is EXPORTS and "comfyui" in EXPORTS.export_formats()
