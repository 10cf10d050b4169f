"""A Wan LoRA in ComfyUI's key format: ``diffusion_model.<original Wan name>.lora_A/lora_B.weight``.

dit-lora writes a Wan adapter as diffusers' ``WanPipeline.save_lora_weights`` does (``transformer.blocks.0.attn1.
to_q.lora_A.weight``), with the scale alpha/r already folded into ``lora_B`` (``fold_lora_scale`` in
:mod:`dit_lora.output.adapter`). ComfyUI does not load that file for Wan. What the sources say:

* ComfyUI (``comfy/lora.py``, ``model_lora_keys_unet``) maps a LoRA module to a model weight for every model by the
  model's own state-dict names: ``diffusion_model.<name>`` (and ``lora_unet_<name with _>``). Its diffusers-name
  branches exist only for SD3, AuraFlow, HunyuanDiT and Flux; for Wan 2.1/2.2 a diffusers-named key is not loaded
  ("lora key not loaded"; ComfyUI issue 8285, /work/shared/ANCHORS.md "Wan 2.x and ComfyUI").
* ComfyUI's Wan model (``comfy/ldm/wan/model.py``) keeps the original Wan names: ``blocks.N.self_attn.{q,k,v,o}``,
  ``blocks.N.cross_attn.{q,k,v,o,k_img,v_img}``, ``blocks.N.ffn.{0,2}`` (``Sequential(Linear, GELU, Linear)``),
  ``text_embedding.{0,2}``, ``time_embedding.{0,2}``, ``time_projection.1`` (``Sequential(SiLU, Linear)``),
  ``head.head`` and, for I2V, ``img_emb.proj.{1,3}`` (``MLPProj``: ``LayerNorm, Linear, GELU, Linear, LayerNorm``).
* diffusers' single-file converter ``convert_wan_transformer_to_diffusers`` (``loaders/single_file_utils.py``)
  renames exactly those to diffusers' names (``self_attn`` -> ``attn1``, ``.q.`` -> ``.to_q.``, ``.o.`` ->
  ``.to_out.0.``, ``k_img`` -> ``add_k_proj``, ``ffn.0`` -> ``ffn.net.0.proj``, ``time_projection.1`` ->
  ``condition_embedder.time_proj``, ``head.head`` -> ``proj_out``, ``img_emb.proj.1`` ->
  ``condition_embedder.image_embedder.ff.net.0.proj`` ...); ``comfyui.json`` is its inverse for the Linear layers.
* ComfyUI reads ``<x>.lora_B.weight`` / ``<x>.lora_A.weight`` (besides ``lora_up``/``lora_down``), an optional
  ``<x>.alpha`` tensor and ``<x>.diff_b`` as a bias difference (``comfy/lora.py: load_lora``). Its
  ``weight_adapter/lora.py`` applies ``alpha / rank`` when ``.alpha`` is present and **scale 1.0 when it is not**.
  Alpha in the file's metadata is ignored (ComfyUI 12191).
* diffusers loads such a file back (``WanLoraLoaderMixin.lora_state_dict``: any ``diffusion_model.`` key ->
  ``_convert_non_diffusers_wan_lora_to_diffusers`` in ``loaders/lora_conversion_utils.py``), which is how the
  tests prove the export exact without ComfyUI.

**No ``.alpha`` tensors are written.** The fold already put alpha/r into ``lora_B``, so scale 1.0 is the trained
strength, and without ``.alpha`` ComfyUI applies exactly 1.0. Writing ``alpha = rank`` would mean the same to
ComfyUI but breaks diffusers' converter (0.42): it pops ``.alpha`` only for the block layers, leaves
``text_embedding.0.alpha`` (and the other embedders' and ``head.head``'s) behind and then raises
"``state_dict`` should be empty", so the file would not load in diffusers when the embedders were trained.

A ``lora_B.bias`` (PEFT ``lora_bias``; dit-lora does not train one, diffusers writes it when present) becomes
``<x>.diff_b``: with the scale folded it is exactly the difference added to the layer's bias, which ComfyUI applies
as such and diffusers' converter maps back to ``lora_B.bias``.

The other adapter types (:mod:`dit_lora.output.comfyui_types`): a **LoKr** or **LoHa** layer keeps PEFT's tensor
names under the same ComfyUI module name (``diffusion_model.blocks.0.self_attn.q.lokr_w1``, ``...hada_w1_a``), which
ComfyUI's ``weight_adapter/lokr.py`` / ``loha.py`` read; the scale is folded into ``lokr_w1`` (``lokr_w1_a``) /
``hada_w1_a`` and no ``.alpha`` is written, so ComfyUI's scale is 1.0 and its update PEFT's. Wan has no fused
weight in ComfyUI, so every layer maps one to one. A **DoRA** adapter is refused (ComfyUI's ``dora_scale`` is
another normalisation; :func:`~dit_lora.output.comfyui_types.dora_refusal`), and a run does not write its file.
diffusers' converter reads the LoRA file back; it has no LoKr/LoHa form.
"""

from __future__ import annotations

from pathlib import Path

from dit_lora.core.errors import UserError
from dit_lora.output.comfyui_types import SUFFIX as SUFFIX  # the files' suffix, for callers
from dit_lora.output.comfyui_types import RenamedExport, RenameTable, plan_export, write_planned
from dit_lora.output.names import ADAPTER_FILE, PEFT_ADAPTER_FILE

#: the default adapter file of a run and the expert it holds (the lead's two-expert spec passes its own map)
DEFAULT_FILES = {"pytorch_lora_weights.safetensors": "high"}

#: diffusers module name (after ``transformer.``) -> original Wan / ComfyUI name: ``comfyui.json``
TABLE = RenameTable.read(__name__)
_KNOWN = (
    "the blocks' attn1/attn2 to_q/to_k/to_v/to_out.0, attn2 add_k_proj/add_v_proj, ffn.net.0.proj/ffn.net.2, "
    "condition_embedder's text/time/image embedders and time_proj, proj_out"
)
#: what the files' metadata says of their keys
KEYS = (
    "diffusion_model.<original Wan name>.lora_A/lora_B.weight (LoKr: .lokr_w1..., LoHa: .hada_w1_a...); no .alpha: "
    "scale 1.0, alpha/rank is folded into lora_B (lokr_w1, hada_w1_a)"
)
#: ``dit-lora export --format comfyui``'s one format, and how faithful it is
DESCRIPTION = (
    "ComfyUI's Wan key names (diffusion_model.blocks.N.self_attn.q, ...) with the strength folded into lora_B (LoKr: "
    "lokr_w1, LoHa: hada_w1_a) and no .alpha keys, so strength 1.0 is the trained one; ComfyUI's own loader applies "
    "every tensor at the trained strength (dit-lora's comfyui tests) and a LoRA file reproduces the trained output "
    "through diffusers' converter; DoRA is refused (ComfyUI's dora_scale is another normalisation)"
)
#: the conversion of one file (``WanExports`` in ``adapter.py`` adds the experts' files and the index)
CONVERSION = RenamedExport("Wan", TABLE, _KNOWN, KEYS, DESCRIPTION)
#: the original Wan (ComfyUI) name of a diffusers module (no ``transformer.`` prefix), or None
comfyui_module = TABLE.rename
#: a saved Wan adapter (scale folded; LoRA, LoKr or LoHa) with ComfyUI's keys, tensors and dtypes unchanged:
#: ``transformer.blocks.0.attn1.to_q.lora_A.weight`` -> ``diffusion_model.blocks.0.self_attn.q.lora_A.weight``,
#: ``lora_B.bias`` -> ``diff_b``; refusals as :meth:`RenamedExport.comfyui_state` says
comfyui_state = CONVERSION.comfyui_state


def run_files(adapter_dir: Path, files: dict[str, str]) -> dict[str, str]:
    """``files`` (adapter file -> expert) as the run wrote them: a LoKr/LoHa run writes PEFT's
    ``adapter_model.safetensors`` where a LoRA run writes ``pytorch_lora_weights.safetensors``."""
    lokr_or_loha = not (adapter_dir / ADAPTER_FILE).is_file() and (adapter_dir / PEFT_ADAPTER_FILE).is_file()
    return {PEFT_ADAPTER_FILE: files[ADAPTER_FILE]} if list(files) == [ADAPTER_FILE] and lokr_or_loha else files


def write_comfyui_files(adapter_dir: Path, files: dict[str, str] | None = None) -> list[Path]:
    """Write ``<stem>_comfyui.safetensors`` next to each Wan adapter file (LoRA, LoKr, LoHa) of ``adapter_dir``.

    ``files`` maps each adapter file name to its expert (default :data:`DEFAULT_FILES`; a Wan 2.2 A14B run passes
    ``{"pytorch_lora_weights.safetensors": "high", "pytorch_lora_weights_low_noise.safetensors": "low"}``). Every
    file is converted and checked (keys mapped, tensors finite) before any is written; each is written atomically
    with metadata naming its source, format and expert. A target that is a user's own file is refused
    (:func:`dit_lora.output.export.export_target`). Returns the written paths.
    """
    adapter_dir = Path(adapter_dir)
    planned = []
    for name, expert in (files or DEFAULT_FILES).items():
        source = adapter_dir / name
        if Path(name).name != name or not name.endswith(".safetensors"):
            raise UserError(
                f"`{name}` is not the file name of a safetensors adapter in {adapter_dir}; the Wan "
                "export converts the run's pytorch_lora_weights*.safetensors (or adapter_model.safetensors) files."
            )
        if not source.is_file():
            raise UserError(
                f"{source} does not exist: the {expert}-noise expert's adapter is missing. Export the "
                "--output_dir of a finished Wan run."
            )
        # a NaN/Inf adapter would load and render black frames for whoever uses it
        advice = "re-train (e.g. a lower learning rate) or export an earlier finite checkpoint."
        planned.append(plan_export(adapter_dir, name, comfyui_state, KEYS, advice, dit_lora_expert=expert))
    return write_planned(planned)
