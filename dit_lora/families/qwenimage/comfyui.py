"""Qwen-Image in ComfyUI: its diffusers-named adapter loads there as it is; ``dit-lora export --format comfyui``
writes the same names for every adapter type ComfyUI reproduces.

ComfyUI's ``QwenImage`` model (``comfy/ldm/qwen_image/model.py``; ComfyUI commit 618b803d, Jan 2026) keeps
diffusers' module names, and ``model_lora_keys_unet`` (``comfy/lora.py``) maps each weight's module as
``<name>``, ``transformer.<name>``, ``diffusion_model.<name>`` and ``lycoris_<name with _>``. No weight is fused, so
LoRA, LoKr (``lokr_w1``...) and LoHa (``hada_w1_a``...) layers load one to one; the run's
``pytorch_lora_weights.safetensors`` already loads for LoRA (tests/families/qwenimage/test_adapter.py). The export
writes ``transformer.<module>.<tensor>`` from whichever prefix the run's file has, checking each module against the
model's Linear layers (:data:`_MODULES`), and refuses DoRA (:func:`~dit_lora.output.comfyui_types.dora_refusal`).
"""

from __future__ import annotations

import re

from dit_lora.output.comfyui_types import PrefixedExports

#: the Linear layers of ComfyUI's QwenImage (= diffusers' QwenImageTransformer2DModel's names)
_MODULES = re.compile(
    r"^(transformer_blocks\.\d+\.(attn\.(to_q|to_k|to_v|to_out\.0|add_q_proj|add_k_proj|add_v_proj|to_add_out)"
    r"|(img|txt)_mlp\.net\.(0\.proj|2)|(img|txt)_mod\.1)|img_in|txt_in|proj_out|norm_out\.linear"
    r"|time_text_embed\.timestep_embedder\.linear_[12])$"
)
_KNOWN = (
    "the blocks' attention projections, img/txt MLPs and modulations, img_in, txt_in, proj_out, norm_out.linear, "
    "the timestep embedder"
)


def comfyui_module(module: str) -> bool:
    """Whether ComfyUI's QwenImage model has the diffusers module ``module``."""
    return bool(_MODULES.match(module))


#: ``FamilySpec.exports``: ``dit-lora export --format comfyui``
EXPORTS = PrefixedExports(
    "Qwen-Image",
    comfyui_module,
    _KNOWN,
    "diffusers' names, which ComfyUI's QwenImage model keeps; LoRA, LoKr and LoHa with the strength folded in "
    "(for LoRA the adapter file itself loads too)",
)
