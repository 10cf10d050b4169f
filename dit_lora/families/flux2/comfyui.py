"""A FLUX.2 LoRA (LoKr, LoHa) in ComfyUI's key format: ``diffusion_model.<BFL name>.lora_A/lora_B.weight``.

dit-lora writes a FLUX.2 adapter as ``Flux2Pipeline.save_lora_weights`` does (``transformer.single_transformer_blocks
.0.attn.to_qkv_mlp_proj.lora_A.weight``), with alpha/r folded into ``lora_B``. What the sources say about ComfyUI
(the Jan 2026 snapshot with ``comfy.model_base.Flux2``):

* ``Flux2`` subclasses ``Flux``, so ``model_lora_keys_unet`` (``comfy/lora.py``) maps its diffusers names with
  ``comfy.utils.flux_to_diffusers``: FLUX.1's names. Of FLUX.2's it maps the double blocks' ``to_q/to_k/to_v``,
  ``add_*_proj``, ``to_out.0``, ``to_add_out``, ``x_embedder``, ``context_embedder``, ``proj_out`` and
  ``norm_out.linear``; not the single blocks' ``attn.to_qkv_mlp_proj`` and ``attn.to_out`` (FLUX.1's single blocks
  are ``to_q``... and ``proj_out``), the ``ff.linear_in/out`` MLPs, the shared modulation layers or the
  timestep/guidance embedders: diffusers' default targets would load only half (the single blocks are left out
  with "lora key not loaded").
* ComfyUI's FLUX.2 model keeps Black Forest Labs' names (``comfy/ldm/flux/model.py``), which the generic rule
  maps (:class:`~dit_lora.output.comfyui_types.RenamedExport`: every layer, no ``.alpha``, on every run).
* diffusers' ``scripts/convert_flux2_to_diffusers.py`` renames BFL to diffusers (``single_blocks.N.linear1`` ->
  ``attn.to_qkv_mlp_proj``, ``linear2`` -> ``attn.to_out``, ``img_mlp.0`` -> ``ff.linear_in``, ``*.lin`` ->
  ``*.linear``, ``time_in.in_layer`` -> ``time_guidance_embed.timestep_embedder.linear_1``, ``final_layer.linear``
  -> ``proj_out``), splits the fused ``img_attn.qkv`` / ``txt_attn.qkv`` into ``to_q, to_k, to_v`` /
  ``add_q_proj...`` (``torch.chunk(..., 3)``) and swaps ``final_layer.adaLN_modulation.1``'s shift/scale halves into
  ``norm_out.linear``'s scale/shift. ``comfyui.json`` is its inverse: the renames, the fused q/k/v and the swapped
  halves, which :class:`~dit_lora.output.comfyui_fused.FusedExport` writes (a LoRA's q/k/v fused, LoKr/LoHa as
  slices by diffusers' name).

diffusers reads the file back (``Flux2LoraLoaderMixin.lora_state_dict``: ``diffusion_model.`` keys ->
``_convert_non_diffusers_flux2_lora_to_diffusers``, which gives each of q, k, v the stacked ``A`` and its third of
``B``): the same products, except ``norm_out.linear``'s, whose BFL halves that converter (0.42.1) maps without the
swap its own checkpoint conversion applies (the diffusers file is the one to load in diffusers). A **DoRA** adapter is
refused (:func:`~dit_lora.output.comfyui_types.dora_refusal`); a run writes no file.
"""

from __future__ import annotations

from dit_lora.output.comfyui_fused import FusedExport
from dit_lora.output.comfyui_types import SUFFIX

_KNOWN = "the blocks' attention, MLP and modulation layers, the embedders, proj_out and norm_out"


#: ``FamilySpec.exports`` and ``adapter_extras``: every run also writes its ComfyUI-named file beside the adapter
#: (ComfyUI maps no diffusers name of FLUX.2's single blocks, feed-forwards or modulations: the diffusers file loads
#: only part of the LoRA there); ``dit-lora export --format comfyui``
EXPORT = FusedExport(
    "FLUX.2",
    __name__,
    _KNOWN,
    keys="diffusion_model.<BFL name>.lora_A/lora_B.weight, q/k/v fused (LoKr/LoHa: PEFT's tensor names, q/k/v and "
    "norm_out by diffusers' name); no .alpha: scale 1.0, alpha/rank is folded in",
    description="ComfyUI's key names (BFL's, q/k/v fused; LoKr/LoHa: PEFT's tensor names, q/k/v as slices of the "
    f"fused weight): <adapter>{SUFFIX} next to the adapter; DoRA is refused (ComfyUI's dora_scale is another "
    "normalisation)",
    wrong_format="{family} exports only `comfyui`, not `{fmt}`.",
)
#: diffusers module -> BFL (ComfyUI) name of every unfused layer: ``comfyui.json``
TABLE = EXPORT.table
