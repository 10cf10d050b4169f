"""A HunyuanVideo 1.5 LoRA (LoKr, LoHa) in ComfyUI's key format: ``diffusion_model.<ComfyUI name>``.

dit-lora writes a HunyuanVideo 1.5 adapter with diffusers' names (``transformer.transformer_blocks.0.attn.to_q
.lora_A.weight``), alpha/r folded into ``lora_B``, and it loads through ``pipe.transformer.load_lora_adapter`` (the
pipeline has no LoRA loader of its own in diffusers 0.42). ComfyUI runs HunyuanVideo 1.5 as its ``HunyuanVideo15``
model (``comfy/supported_models.py``, ``comfy/ldm/hunyuan_video/model.py``), Tencent's layout under ComfyUI's own
names: ``double_blocks.N.img_attn.qkv`` (q, k and v fused, Flux's ``DoubleStreamBlock``), ``img_attn.proj``,
``img_mlp.0``/``.2``, ``img_mod.lin`` and their ``txt_`` twins, the token refiner's ``self_attn.qkv``, ``byt5_in``,
``vision_in``, ``final_layer``. What ComfyUI's loader maps (``model_lora_keys_unet``, ``comfy/lora.py``, read and run
at upstream commits 3cd7b32f and fe251146, January and February 2026): for a HunyuanVideo model only its own names
(``diffusion_model.<name>``, and diffusion-pipe's ``transformer.<name>`` spelling of them); no diffusers name. The
diffusers file therefore loads nothing in ComfyUI.

So every run also writes ``<adapter>_comfyui.safetensors`` with ComfyUI's names (``comfyui.json``: the inverse of
diffusers' conversion script and of ComfyUI's state-dict renames): a LoRA's q, k, v (each stream's, and the
refiner's) fused into one ``qkv`` LoRA (the ``A``s stacked, the ``B``s block-diagonal: the product is exactly the
three), ``norm_out.linear``'s halves swapped back into ``final_layer.adaLN_modulation.1``, every other layer under
its ComfyUI name; a LoKr's or LoHa's q, k, v as the exact update of the fused weight (``.diff``: no factor of it
equals three layers' products). That update is a full fp32 weight per stream and block (about 5.4 GiB for the 8.3B
model), so a LoKr or LoHa run writes no ComfyUI file by itself, it says so and names ``dit-lora export --format
comfyui``, which writes it (:data:`~dit_lora.output.comfyui_fused.AUTO_DIFF_BYTES`). A **DoRA** adapter is refused
(ComfyUI's ``dora_scale`` is another normalisation); a run then writes no ComfyUI file.
"""

from __future__ import annotations

from dit_lora.output.comfyui_fused import FusedExport
from dit_lora.output.comfyui_types import SUFFIX

_KNOWN = (
    "every Linear layer of HunyuanVideo15Transformer3DModel (both streams' attention and feed-forwards, their "
    "modulations, the token refiner, the caption, ByT5, image and timestep embedders, norm_out and proj_out) and the "
    "patch embedder x_embedder.proj"
)

#: ``FamilySpec.exports`` and ``adapter_extras``: every run also writes its ComfyUI-named file beside the adapter
#: (ComfyUI maps no diffusers name of HunyuanVideo 1.5); ``dit-lora export --format comfyui``
EXPORT = FusedExport(
    "HunyuanVideo 1.5",
    __name__,
    _KNOWN,
    keys="diffusion_model.<ComfyUI name>.lora_A/lora_B.weight, q/k/v fused per stream (LoKr/LoHa: PEFT's tensor "
    "names, q/k/v as the fused weight's .diff); no .alpha: scale 1.0, alpha/rank is folded in",
    description="ComfyUI's key names (Tencent's layout, q/k/v fused; LoKr/LoHa: PEFT's tensor names, q/k/v as the "
    f"fused weight's exact update): <adapter>{SUFFIX} next to the adapter; DoRA is refused (ComfyUI's dora_scale is "
    "another normalisation)",
    typed_fused="diff",
)
