"""Z-Image in ComfyUI: its diffusers-named adapter loads there as it is; ``dit-lora export --format comfyui`` writes
the same names for every adapter type ComfyUI reproduces.

ComfyUI runs Z-Image as its ``Lumina2`` model (NextDiT with fused ``attention.qkv``), and ``model_lora_keys_unet``
(``comfy/lora.py``; ComfyUI commit 618b803d, Jan 2026) maps ``transformer.<diffusers name>`` (and
``diffusion_model.<diffusers name>``) through ``comfy.utils.z_image_to_diffusers``: ``to_q``/``to_k``/``to_v`` onto
their third of ``attention.qkv`` (``(qkv.weight, (0, offset, dim))``), the rest one to one (:data:`_MODULES`).
ComfyUI's ``calculate_weight`` narrows the fused weight to that third before any ``weight_adapter`` adds its
update, so a LoRA, LoKr or LoHa of q, k or v patches exactly its slice (a Kronecker or Hadamard product of three
layers is no factor of the fused weight: the slices are what make LoKr/LoHa loadable here).

The run's ``pytorch_lora_weights.safetensors`` (``ZImagePipeline.save_lora_weights``: ``transformer.<name>``) is
therefore already a ComfyUI file for LoRA (tests/families/zimage/test_comfyui_loader.py). The export writes
``transformer.<module>.<tensor>`` for LoRA, LoKr and LoHa alike from whichever prefix the run's file has (diffusers',
PEFT's ``base_model.model.`` or none), checking each module against ComfyUI's map, and refuses DoRA
(:func:`~dit_lora.output.comfyui_types.dora_refusal`).
"""

from __future__ import annotations

import re

from dit_lora.output.comfyui_types import PrefixedExports

#: the diffusers modules ``comfy.utils.z_image_to_diffusers`` maps (its block keys for layers, context_refiner and
#: noise_refiner, and its MAP_BASIC)
_MODULES = re.compile(
    r"^((layers|context_refiner|noise_refiner)\.\d+\.(attention\.(to_q|to_k|to_v|to_out\.0)|feed_forward\.w[123]"
    r"|adaLN_modulation\.0)|all_final_layer\.2-1\.(linear|adaLN_modulation\.1)|all_x_embedder\.2-1|cap_embedder\.1"
    r"|t_embedder\.mlp\.[02])$"
)
_KNOWN = (
    "the layers' and refiners' attention to_q/to_k/to_v/to_out.0, feed_forward w1-w3 and adaLN_modulation.0, "
    "all_x_embedder.2-1, all_final_layer.2-1.linear/adaLN_modulation.1, cap_embedder.1, t_embedder.mlp.0/2"
)


def comfyui_module(module: str) -> bool:
    """Whether ComfyUI's Z-Image (Lumina2) key map has the diffusers module ``module``."""
    return bool(_MODULES.match(module))


#: ``FamilySpec.exports``: ``dit-lora export --format comfyui``
EXPORTS = PrefixedExports(
    "Z-Image",
    comfyui_module,
    _KNOWN,
    "diffusers' names, which ComfyUI maps (q/k/v as thirds of its fused qkv); LoRA, LoKr and LoHa with the "
    "strength folded in (for LoRA the adapter file itself loads too)",
)
