"""A Lumina 2 LoRA (LoKr, LoHa) in ComfyUI's key format: ``diffusion_model.<Lumina 2 name>``.

dit-lora writes a Lumina 2 adapter as ``Lumina2Pipeline.save_lora_weights`` does (``transformer.layers.0.attn.to_q
.lora_A.weight``), with alpha/r folded into ``lora_B``. ComfyUI runs Lumina-Image 2.0 as its ``Lumina2`` model, the
NextDiT of ``comfy/ldm/lumina/model.py`` with the original checkpoint's names (``layers.N.attention.qkv``, q, k and v
fused; ``attention.out``, ``feed_forward.w1``-``w3``, ``adaLN_modulation.1``, ``cap_embedder.1``, ``t_embedder.mlp``,
``final_layer``). What the sources say about mapping a diffusers-named file there:

* ComfyUI commit a125cd84 (October 2025): ``model_lora_keys_unet`` (``comfy/lora.py``) has no Lumina 2 branch, so only
  the generic ``diffusion_model.<its own name>`` (and ``lora_unet_``) keys load: diffusers' names do not.
* Newer ComfyUI maps ``model_base.Lumina2`` through ``comfy.utils.z_image_to_diffusers``, the Z-Image table: its
  names (``attention.to_q``, ``feed_forward.w1``) are not Lumina 2's diffusers names (``attn.to_q``,
  ``feed_forward.linear_1``), and its q/k/v slices are ``dim`` rows each, where Lumina 2's k and v have 768 of 2304
  (grouped-query attention).

So every run also writes ``<adapter>_comfyui.safetensors`` with ComfyUI's own names (``comfyui.json``, the inverse of
diffusers' ``convert_lumina2_to_diffusers``): a LoRA's q, k, v fused into one ``attention.qkv`` LoRA (the ``A``s
stacked, the ``B``s block-diagonal in rows 3 : 1 : 1), a LoKr's or LoHa's q, k, v as the exact update of
``attention.qkv`` (``.diff``: a product of three layers' factors is no factor of the fused weight, and ComfyUI names
no slice of it), every other layer under its own name with PEFT's tensor names (the diffusers file is the one to load in diffusers).
A **DoRA** adapter is refused
(:func:`~dit_lora.output.comfyui_types.dora_refusal`); a run writes no file.
"""

from __future__ import annotations

from dit_lora.output.comfyui_fused import FusedExport
from dit_lora.output.comfyui_types import SUFFIX

_KNOWN = (
    "the layers' and refiners' attention (q/k/v and to_out.0), feed-forward linear_1-3 and norm1.linear, x_embedder, "
    "the caption and timestep embedders' linears and norm_out.linear_1/2"
)

#: ``FamilySpec.exports`` and ``adapter_extras``: every run also writes its ComfyUI-named file beside the adapter
#: (ComfyUI maps no diffusers name of Lumina 2 correctly); ``dit-lora export --format comfyui``
EXPORT = FusedExport(
    "Lumina 2",
    __name__,
    _KNOWN,
    keys="diffusion_model.<Lumina 2 name>.lora_A/lora_B.weight, q/k/v fused (LoKr/LoHa: PEFT's tensor names, q/k/v "
    "as the fused weight's .diff); no .alpha: scale 1.0, alpha/rank is folded in",
    description="ComfyUI's key names (Lumina 2's own, q/k/v fused; LoKr/LoHa: PEFT's tensor names, q/k/v as the "
    f"fused weight's exact update): <adapter>{SUFFIX} next to the adapter; DoRA is refused (ComfyUI's dora_scale is "
    "another normalisation)",
    typed_fused="diff",
)
