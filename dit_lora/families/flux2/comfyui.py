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
  ``norm_out.linear``'s scale/shift. ``comfyui.json`` is its inverse.

A fused ``qkv`` gets one LoRA whose product is exactly the three: ``lora_A`` the separate ``A``s stacked (rank
``r_q + r_k + r_v``), ``lora_B`` block-diagonal (each ``B`` in its third of the rows, under its ``A``'s columns), so
``B @ A`` is the three products stacked; a projection not trained stays a zero block. ``norm_out.linear``'s ``B``
rows are swapped back. diffusers reads the file back (``Flux2LoraLoaderMixin.lora_state_dict``: ``diffusion_model.``
keys -> ``_convert_non_diffusers_flux2_lora_to_diffusers``, which gives each of q, k, v the stacked ``A`` and its third
of ``B``): the same products, except ``norm_out.linear``'s, whose BFL halves that converter (0.42.1) maps without the
swap its own checkpoint conversion applies (the diffusers file is the one to load in diffusers).

The other adapter types (:mod:`dit_lora.output.comfyui_types`, ComfyUI's ``weight_adapter/lokr.py`` / ``loha.py``):
a **LoKr** or **LoHa** layer keeps PEFT's tensor names (``lokr_w1``..., ``hada_w1_a``...). Its q/k/v cannot be
fused: the three updates stacked, ``[kron(a1, a2); kron(b1, b2); kron(c1, c2)]``, are not one Kronecker (or Hadamard)
product of factors, so there is no ``img_attn.qkv`` LoKr equal to them. They are written instead under diffusers'
names (``transformer.transformer_blocks.N.attn.to_q.lokr_w1``), which ``flux_to_diffusers`` maps to
``(img_attn.qkv.weight, (0, offset, hidden))``: ComfyUI's ``calculate_weight`` narrows the fused weight to that third before any
``weight_adapter`` adds its update, so each LoKr/LoHa patches exactly its slice. ``norm_out.linear`` likewise goes
by its diffusers name, where ComfyUI applies ``swap_scale_shift`` to the update (a half swap of a Kronecker
product's rows is not one of its factors' unless the first factor's rows are even). Every other layer has BFL's
name. A **DoRA** adapter is refused (:func:`~dit_lora.output.comfyui_types.dora_refusal`); a run writes no file.
"""

from __future__ import annotations

import re

import torch

from dit_lora.core.errors import UserError
from dit_lora.output.comfyui_types import LORA, SUFFIX, Layer, RenamedExport, RenameTable, comfyui_tensors

#: the fused projections: diffusers' three modules of a double block -> (BFL name, position in the fused rows)
_FUSED = re.compile(r"^transformer_blocks\.(\d+)\.attn\.(to_q|to_k|to_v|add_q_proj|add_k_proj|add_v_proj)$")
_FUSED_PARTS = {"to_q": ("img", 0), "to_k": ("img", 1), "to_v": ("img", 2)} | {
    f"add_{p}_proj": ("txt", i) for i, p in enumerate("qkv")
}
_SWAPPED = "final_layer.adaLN_modulation.1"  # diffusers' (scale, shift) rows are BFL's (shift, scale)
_DIFFUSERS_SWAPPED = "norm_out.linear"
#: diffusers module -> BFL (ComfyUI) name of every unfused layer: ``comfyui.json``
TABLE = RenameTable.read(__name__)
_KNOWN = "the blocks' attention, MLP and modulation layers, the embedders, proj_out and norm_out"


def _fuse(parts: dict[int, dict[str, torch.Tensor]]) -> tuple[torch.Tensor, torch.Tensor]:
    """One LoRA for a fused q/k/v weight from the LoRAs of its thirds (``parts``: position -> halves): the ``A``s
    stacked, the ``B``s block-diagonal in their thirds of the rows (a missing third: zero rows)."""
    first = next(iter(parts.values()))
    out_rows = first["lora_B.weight"].shape[0]
    ranks = {i: p["lora_A.weight"].shape[0] for i, p in sorted(parts.items())}
    lora_a = torch.cat([parts[i]["lora_A.weight"] for i in ranks])
    lora_b = torch.zeros(3 * out_rows, sum(ranks.values()), dtype=first["lora_B.weight"].dtype)
    column = 0
    for i, rank in ranks.items():
        lora_b[i * out_rows : (i + 1) * out_rows, column : column + rank] = parts[i]["lora_B.weight"]
        column += rank
    return lora_a.contiguous(), lora_b


class Flux2Export(RenamedExport):
    """FLUX.2's ComfyUI file (:class:`~dit_lora.output.comfyui_types.RenamedExport`, ``comfyui.json``'s names): a
    LoRA's double-block q/k/v fused and ``norm_out``'s halves swapped (module docstring)."""

    wrong_format = "{family} exports only `comfyui`, not `{fmt}`."

    def accepts(self, module: str) -> bool:
        """A double block's q/k/v, or a module of the table."""
        return bool(_FUSED.match(module)) or super().accepts(module)

    def typed_layer_name(self, module: str) -> str:
        """ComfyUI's key for a LoKr/LoHa layer of ``module``: a double block's q/k/v and ``norm_out.linear`` by
        diffusers' name (ComfyUI maps those onto their third of the fused ``qkv`` / with the halves swapped), the
        rest by BFL's."""
        if _FUSED.match(module) or module == _DIFFUSERS_SWAPPED:
            return f"transformer.{module}"
        return self.layer_name(module)

    def convert(self, layers: dict[str, Layer], source: str) -> dict[str, torch.Tensor]:
        """LoRA: BFL's names, the double blocks' q/k/v fused, ``norm_out``'s halves swapped; a LoRA bias refused.
        LoKr and LoHa: PEFT's tensor names under :meth:`typed_layer_name` (no fusing: a product of three layers'
        factors is no factor of the fused weight)."""
        out: dict[str, torch.Tensor] = {}
        fused: dict[str, dict[int, dict[str, torch.Tensor]]] = {}
        for module, layer in layers.items():
            if layer.kind != LORA:
                out.update(comfyui_tensors(self.typed_layer_name(module), layer))
                continue
            if "lora_B.bias" in layer.tensors:
                raise UserError(
                    f"{source}: the layer `{module}` has a LoRA bias (lora_B.bias), which has no ComfyUI form for a "
                    "FLUX.2 layer here. Nothing was written: train without a LoRA bias, or load the diffusers file."
                )
            halves = layer.tensors
            match = _FUSED.match(module)
            if match:
                stream, position = _FUSED_PARTS[match.group(2)]
                fused.setdefault(f"double_blocks.{match.group(1)}.{stream}_attn.qkv", {})[position] = halves
                continue
            lora_b = halves["lora_B.weight"]
            if self.layer_name(module) == self.prefix + _SWAPPED:
                scale, shift = lora_b.chunk(2, dim=0)
                lora_b = torch.cat([shift, scale])
            out[f"{self.layer_name(module)}.lora_A.weight"] = halves["lora_A.weight"].contiguous()
            out[f"{self.layer_name(module)}.lora_B.weight"] = lora_b.contiguous()
        for name, parts in fused.items():
            out[f"{self.prefix}{name}.lora_A.weight"], out[f"{self.prefix}{name}.lora_B.weight"] = _fuse(parts)
        return out


#: ``FamilySpec.exports`` and ``adapter_extras``: every run also writes its ComfyUI-named file beside the adapter
#: (ComfyUI maps no diffusers name of FLUX.2's single blocks, feed-forwards or modulations: the diffusers file loads
#: only part of the LoRA there); ``dit-lora export --format comfyui``
EXPORT = Flux2Export(
    "FLUX.2",
    TABLE,
    _KNOWN,
    keys="diffusion_model.<BFL name>.lora_A/lora_B.weight, q/k/v fused (LoKr/LoHa: PEFT's tensor names, q/k/v and "
    "norm_out by diffusers' name); no .alpha: scale 1.0, alpha/rank is folded in",
    description="ComfyUI's key names (BFL's, q/k/v fused; LoKr/LoHa: PEFT's tensor names, q/k/v as slices of the "
    f"fused weight): <adapter>{SUFFIX} next to the adapter; DoRA is refused (ComfyUI's dora_scale is another "
    "normalisation)",
)
