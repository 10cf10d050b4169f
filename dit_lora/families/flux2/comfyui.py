"""A FLUX.2 LoRA in ComfyUI's key format: ``diffusion_model.<BFL name>.lora_A/lora_B.weight``.

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
"""

from __future__ import annotations

import re
from pathlib import Path

import torch

from dit_lora.core.errors import UserError
from dit_lora.core.fileio import save_safetensors_atomic
from dit_lora.output.adapter import NonFiniteWeightsError, assert_finite
from dit_lora.output.export import export_metadata, export_target

FORMAT = "comfyui"
SUFFIX = "_comfyui.safetensors"
ADAPTER = "pytorch_lora_weights.safetensors"
_PREFIX_IN, _PREFIX_OUT = "transformer.", "diffusion_model."
_HALVES = ("lora_A.weight", "lora_B.weight")

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


def comfyui_module(module: str) -> str | None:
    """The BFL (ComfyUI) name of the unfused diffusers module ``module`` (no ``transformer.`` prefix), or None."""
    for pattern, replacement in _MODULES:
        if pattern.match(module):
            return pattern.sub(replacement, module)
    return None


def _unknown(source: str, key: str) -> UserError:
    return UserError(
        f"{source}: `{key}` is not a LoRA weight of a FLUX.2 transformer layer ComfyUI can load (keys "
        "`transformer.<layer>.lora_A.weight`/`lora_B.weight` of the blocks' attention, MLP and modulation layers, "
        "the embedders, proj_out and norm_out; a LoRA bias or DoRA magnitude has no ComfyUI form here). Nothing was "
        "written: train plain LoRA on those layers (--lora_layers), or load the diffusers file itself."
    )


def _modules(lora_state: dict[str, torch.Tensor], source: str) -> dict[str, dict[str, torch.Tensor]]:
    """``{diffusers module: {"lora_A.weight": A, "lora_B.weight": B}}``, refusing any other key or a lone half."""
    found: dict[str, dict[str, torch.Tensor]] = {}
    for key, tensor in lora_state.items():
        half = next((h for h in _HALVES if key.endswith("." + h)), None)
        if not key.startswith(_PREFIX_IN) or half is None:
            raise _unknown(source, key)
        found.setdefault(key[len(_PREFIX_IN) : -len(half) - 1], {})[half] = tensor
    lonely = sorted(m for m, halves in found.items() if len(halves) != 2)
    if lonely:
        raise UserError(
            f"{source}: the layer `{lonely[0]}` has only {', '.join(found[lonely[0]])} (a LoRA layer needs lora_A "
            "and lora_B); the file is damaged. Nothing was written: export the adapter of a finished run again."
        )
    return found


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


def comfyui_state(lora_state: dict[str, torch.Tensor], source: str = "the adapter") -> dict[str, torch.Tensor]:
    """A diffusers-format FLUX.2 LoRA (scale folded into ``lora_B``) with ComfyUI's (BFL's) keys, the double blocks'
    q/k/v fused, ``norm_out``'s halves swapped; each module's ``B @ A`` is what diffusers' file applies there."""
    out: dict[str, torch.Tensor] = {}
    fused: dict[str, dict[int, dict[str, torch.Tensor]]] = {}
    for module, halves in _modules(lora_state, source).items():
        match = _FUSED.match(module)
        if match:
            stream, position = _FUSED_PARTS[match.group(2)]
            fused.setdefault(f"double_blocks.{match.group(1)}.{stream}_attn.qkv", {})[position] = halves
            continue
        name = comfyui_module(module)
        if name is None:
            raise _unknown(source, f"{_PREFIX_IN}{module}.lora_A.weight")
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
    """Write ``pytorch_lora_weights_comfyui.safetensors`` next to the run's diffusers adapter (converted and checked
    finite before anything is written; atomically, with metadata naming source and format)."""
    from safetensors.torch import load_file

    source = Path(adapter_dir) / ADAPTER
    if not source.is_file():
        raise UserError(f"{source} does not exist: export the --output_dir of a finished FLUX.2 run.")
    target = export_target(adapter_dir, ADAPTER[: -len(".safetensors")] + SUFFIX)
    state = comfyui_state(load_file(str(source)), source=str(source))
    try:
        assert_finite(state, str(source))
    except NonFiniteWeightsError as err:
        raise UserError(f"{err} A broken adapter is not exported: re-train or export an earlier checkpoint.") from None
    metadata = export_metadata(
        FORMAT,
        ADAPTER,
        dit_lora_keys="diffusion_model.<BFL name>.lora_A/lora_B.weight, q/k/v fused; no .alpha: scale 1.0, "
        "alpha/rank is folded into lora_B",
    )
    return save_safetensors_atomic(state, target, metadata=metadata)


class Flux2AdapterExtras:
    """``FamilySpec.adapter_extras``: every run also writes its ComfyUI-named file beside the adapter (ComfyUI maps
    no diffusers name of FLUX.2's single blocks, feed-forwards or modulations: the diffusers file loads only part
    of the LoRA there)."""

    def save_adapter_extras(self, output_dir: Path, comps, cfg) -> None:
        """:func:`write_comfyui_file` in the adapter's staging folder (``comps`` is not needed); a plain LoRA only
        (this converter maps lora_A/lora_B: another ``--lora_type`` is written without it, and ``dit-lora export``
        refuses it in one paragraph)."""
        if cfg is None or cfg.lora_type == "lora":
            write_comfyui_file(Path(output_dir))


class Flux2Exports:
    """``FamilySpec.exports``: ``dit-lora export --format comfyui``."""

    def export_formats(self) -> dict[str, str]:
        """The ComfyUI-named file."""
        return {FORMAT: f"ComfyUI's key names (BFL's, q/k/v fused): <adapter>{SUFFIX} next to the adapter"}

    def export_adapter(self, output_dir: Path, fmt: str) -> list[Path]:
        """Write the ComfyUI file of the run in ``output_dir``."""
        if fmt != FORMAT:
            raise UserError(f"FLUX.2 exports only `{FORMAT}`, not `{fmt}`.")
        return [write_comfyui_file(Path(output_dir))]
