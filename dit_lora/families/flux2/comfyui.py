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
* ComfyUI's FLUX.2 model keeps Black Forest Labs' names (``comfy/ldm/flux/model.py``) and maps every
  ``diffusion_model.<its weight name>`` LoRA (the generic rule), reading ``<x>.lora_A.weight`` / ``lora_B.weight``
  and an optional ``<x>.alpha`` (scale 1 without it).
* diffusers' ``scripts/convert_flux2_to_diffusers.py`` renames BFL to diffusers (``single_blocks.N.linear1`` ->
  ``attn.to_qkv_mlp_proj``, ``linear2`` -> ``attn.to_out``, ``img_mlp.0`` -> ``ff.linear_in``, ``*.lin`` ->
  ``*.linear``, ``time_in.in_layer`` -> ``time_guidance_embed.timestep_embedder.linear_1``, ``final_layer.linear``
  -> ``proj_out``), splits the fused ``img_attn.qkv`` / ``txt_attn.qkv`` into ``to_q, to_k, to_v`` /
  ``add_q_proj...`` (``torch.chunk(..., 3)``) and swaps ``final_layer.adaLN_modulation.1``'s shift/scale halves into
  ``norm_out.linear``'s scale/shift. :data:`_MODULES` is its inverse.

A fused ``qkv`` gets one LoRA whose product is exactly the three: ``lora_A`` the separate ``A``s stacked (rank
``r_q + r_k + r_v``), ``lora_B`` block-diagonal (each ``B`` in its third of the rows, under its ``A``'s columns), so
``B @ A`` is the three products stacked; a projection not trained stays a zero block. ``norm_out.linear``'s ``B``
rows are swapped back. No ``.alpha`` is written: the fold already put alpha/r into ``lora_B``. diffusers reads the
file back (``Flux2LoraLoaderMixin.lora_state_dict``: ``diffusion_model.`` keys -> ``_convert_non_diffusers_flux2_
lora_to_diffusers``, which gives each of q, k, v the stacked ``A`` and its third of ``B``): the same products,
except ``norm_out.linear``'s, whose BFL halves that converter (0.42.1) maps without the swap its own checkpoint
conversion applies (the diffusers file is the one to load in diffusers).

The other adapter types (:mod:`dit_lora.output.comfyui_types`, ComfyUI's ``weight_adapter/lokr.py`` / ``loha.py``):
a **LoKr** or **LoHa** layer keeps PEFT's tensor names (``lokr_w1``..., ``hada_w1_a``..., the scale folded into
``lokr_w1``/``lokr_w1_a``/``hada_w1_a``, no ``.alpha``: ComfyUI's scale 1.0). Its q/k/v cannot be fused: the three
updates stacked, ``[kron(a1, a2); kron(b1, b2); kron(c1, c2)]``, are not one Kronecker (or Hadamard) product of
factors, so there is no ``img_attn.qkv`` LoKr equal to them. They are written instead under diffusers' names
(``transformer.transformer_blocks.N.attn.to_q.lokr_w1``), which ``flux_to_diffusers`` maps to ``(img_attn.qkv.weight,
(0, offset, hidden))``: ComfyUI's ``calculate_weight`` narrows the fused weight to that third before any
``weight_adapter`` adds its update, so each LoKr/LoHa patches exactly its slice. ``norm_out.linear`` likewise goes
by its diffusers name, where ComfyUI applies ``swap_scale_shift`` to the update (a half swap of a Kronecker
product's rows is not one of its factors' unless the first factor's rows are even). Every other layer has BFL's
name. A **DoRA** adapter is refused (:func:`~dit_lora.output.comfyui_types.dora_refusal`); a run writes no file.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import TYPE_CHECKING

import torch

from dit_lora.core.errors import UserError
from dit_lora.output.comfyui_types import (
    DORA_NOT_WRITTEN,
    EXPORTED_TYPES,
    LORA,
    adapter_layers,
    comfyui_tensors,
    is_dora_file,
    run_adapter_file,
    write_comfyui_export,
)

if TYPE_CHECKING:
    from dit_lora.config.schema import TrainConfig

FORMAT = "comfyui"
SUFFIX = "_comfyui.safetensors"
ADAPTER = "pytorch_lora_weights.safetensors"
_PREFIX_IN, _PREFIX_OUT = "transformer.", "diffusion_model."

#: diffusers module (after ``transformer.``) -> BFL / ComfyUI name; ``\1`` is the block index
_MODULES: tuple[tuple[re.Pattern, str], ...] = tuple(
    (re.compile(f"^{a}$"), b)
    for a, b in (
        (r"transformer_blocks\.(\d+)\.attn\.to_out\.0", r"double_blocks.\1.img_attn.proj"),
        (r"transformer_blocks\.(\d+)\.attn\.to_add_out", r"double_blocks.\1.txt_attn.proj"),
        (r"transformer_blocks\.(\d+)\.ff\.linear_in", r"double_blocks.\1.img_mlp.0"),
        (r"transformer_blocks\.(\d+)\.ff\.linear_out", r"double_blocks.\1.img_mlp.2"),
        (r"transformer_blocks\.(\d+)\.ff_context\.linear_in", r"double_blocks.\1.txt_mlp.0"),
        (r"transformer_blocks\.(\d+)\.ff_context\.linear_out", r"double_blocks.\1.txt_mlp.2"),
        (r"single_transformer_blocks\.(\d+)\.attn\.to_qkv_mlp_proj", r"single_blocks.\1.linear1"),
        (r"single_transformer_blocks\.(\d+)\.attn\.to_out", r"single_blocks.\1.linear2"),
        (r"x_embedder", "img_in"),
        (r"context_embedder", "txt_in"),
        (r"time_guidance_embed\.timestep_embedder\.linear_1", "time_in.in_layer"),
        (r"time_guidance_embed\.timestep_embedder\.linear_2", "time_in.out_layer"),
        (r"time_guidance_embed\.guidance_embedder\.linear_1", "guidance_in.in_layer"),
        (r"time_guidance_embed\.guidance_embedder\.linear_2", "guidance_in.out_layer"),
        (r"double_stream_modulation_img\.linear", "double_stream_modulation_img.lin"),
        (r"double_stream_modulation_txt\.linear", "double_stream_modulation_txt.lin"),
        (r"single_stream_modulation\.linear", "single_stream_modulation.lin"),
        (r"proj_out", "final_layer.linear"),
        (r"norm_out\.linear", "final_layer.adaLN_modulation.1"),
    )
)
#: the fused projections: diffusers' three modules of a double block -> (BFL name, position in the fused rows)
_FUSED = re.compile(r"^transformer_blocks\.(\d+)\.attn\.(to_q|to_k|to_v|add_q_proj|add_k_proj|add_v_proj)$")
_FUSED_PARTS = {"to_q": ("img", 0), "to_k": ("img", 1), "to_v": ("img", 2)} | {
    f"add_{p}_proj": ("txt", i) for i, p in enumerate("qkv")
}
_SWAPPED = "final_layer.adaLN_modulation.1"  # diffusers' (scale, shift) rows are BFL's (shift, scale)
_DIFFUSERS_SWAPPED = "norm_out.linear"


def comfyui_module(module: str) -> str | None:
    """The BFL (ComfyUI) name of the unfused diffusers module ``module`` (no ``transformer.`` prefix), or None."""
    for pattern, replacement in _MODULES:
        if pattern.match(module):
            return pattern.sub(replacement, module)
    return None


_KNOWN = "the blocks' attention, MLP and modulation layers, the embedders, proj_out and norm_out"


def _accepts(module: str) -> bool:
    return bool(_FUSED.match(module)) or comfyui_module(module) is not None


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


def typed_layer_name(module: str) -> str:
    """ComfyUI's key for a LoKr/LoHa layer of ``module``: a double block's q/k/v and ``norm_out.linear`` by
    diffusers' name (ComfyUI maps those onto their third of the fused ``qkv`` / with the halves swapped), the rest
    by BFL's."""
    if _FUSED.match(module) or module == _DIFFUSERS_SWAPPED:
        return f"{_PREFIX_IN}{module}"
    return f"{_PREFIX_OUT}{comfyui_module(module)}"


def comfyui_state(lora_state: dict[str, torch.Tensor], source: str = "the adapter") -> dict[str, torch.Tensor]:
    """A saved FLUX.2 adapter (scale folded) with ComfyUI's keys; each module's update is what PEFT applies there.

    LoRA: BFL's names, the double blocks' q/k/v fused, ``norm_out``'s halves swapped (module docstring). LoKr and
    LoHa: PEFT's tensor names under :func:`typed_layer_name` (no fusing: a product of three layers' factors is no
    factor of the fused weight). Keys with diffusers' ``transformer.``, PEFT's ``base_model.model.`` or no prefix;
    DoRA, a LoRA bias, an unknown layer or a damaged one is refused in one paragraph.
    """
    out: dict[str, torch.Tensor] = {}
    fused: dict[str, dict[int, dict[str, torch.Tensor]]] = {}
    for module, layer in adapter_layers(lora_state, source, "FLUX.2", _accepts, _KNOWN).items():
        if layer.kind != LORA:
            out.update(comfyui_tensors(typed_layer_name(module), layer))
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
        name = comfyui_module(module)
        lora_b = halves["lora_B.weight"]
        if name == _SWAPPED:
            scale, shift = lora_b.chunk(2, dim=0)
            lora_b = torch.cat([shift, scale])
        out[f"{_PREFIX_OUT}{name}.lora_A.weight"] = halves["lora_A.weight"].contiguous()
        out[f"{_PREFIX_OUT}{name}.lora_B.weight"] = lora_b.contiguous()
    for name, parts in fused.items():
        out[f"{_PREFIX_OUT}{name}.lora_A.weight"], out[f"{_PREFIX_OUT}{name}.lora_B.weight"] = _fuse(parts)
    return out


def write_comfyui_file(adapter_dir: Path) -> Path:
    """Write ``pytorch_lora_weights_comfyui.safetensors`` next to the run's adapter (converted and checked finite
    before anything is written; atomically, with metadata naming source and format)."""
    keys = (
        "diffusion_model.<BFL name>.lora_A/lora_B.weight, q/k/v fused (LoKr/LoHa: PEFT's tensor names, q/k/v and "
        "norm_out by diffusers' name); no .alpha: scale 1.0, alpha/rank is folded in"
    )
    return write_comfyui_export(Path(adapter_dir), "FLUX.2", comfyui_state, keys)


class Flux2AdapterExtras:
    """``FamilySpec.adapter_extras``: every run also writes its ComfyUI-named file beside the adapter (ComfyUI maps
    no diffusers name of FLUX.2's single blocks, feed-forwards or modulations: the diffusers file loads only part
    of the LoRA there). LoKr and LoHa too; not DoRA, which ComfyUI does not reproduce (one line says so)."""

    def save_adapter_extras(self, output_dir: Path, comps, cfg: TrainConfig) -> None:
        """:func:`write_comfyui_file` in the adapter's staging folder (``comps`` and ``cfg`` are not needed)."""
        source = run_adapter_file(Path(output_dir), "FLUX.2")
        if is_dora_file(source):
            print(DORA_NOT_WRITTEN)  # a run must finish; `dit-lora export` refuses it in full
            return
        write_comfyui_file(Path(output_dir))


class Flux2Exports:
    """``FamilySpec.exports``: ``dit-lora export --format comfyui``."""

    def export_formats(self) -> dict[str, str]:
        """The ComfyUI-named file."""
        return {
            FORMAT: f"ComfyUI's key names (BFL's, q/k/v fused; LoKr/LoHa: PEFT's tensor names, q/k/v as slices of "
            f"the fused weight): <adapter>{SUFFIX} next to the adapter; DoRA is refused (ComfyUI's dora_scale is "
            "another normalisation)"
        }

    def export_types(self, fmt: str) -> tuple[str, ...]:
        """The adapter types the ComfyUI file reproduces (not DoRA: :mod:`dit_lora.output.comfyui_types`)."""
        return EXPORTED_TYPES

    def export_adapter(self, output_dir: Path, fmt: str) -> list[Path]:
        """Write the ComfyUI file of the run in ``output_dir``."""
        if fmt != FORMAT:
            raise UserError(f"FLUX.2 exports only `{FORMAT}`, not `{fmt}`.")
        return [write_comfyui_file(Path(output_dir))]
