"""An LTX-2 LoRA in ComfyUI's key format: ``diffusion_model.<Lightricks' name>.lora_A/lora_B.weight``.

dit-lora writes an LTX-2 adapter as diffusers' ``LTX2Pipeline.save_lora_weights`` does
(``transformer.transformer_blocks.0.attn1.to_q.lora_A.weight``), with the scale alpha/r folded into ``lora_B``.
ComfyUI does not load that file for LTX-2. What the sources say (ComfyUI's stored files, 2026; Lightricks' trainer):

* ComfyUI runs LTX-2 as its ``LTXAV`` model (``comfy/supported_models.py``; ``comfy/ldm/lightricks/av_model.py``),
  whose weights keep Lightricks' original names: the blocks' ``attn1``, ``attn2``, ``audio_attn1``, ``audio_attn2``,
  ``audio_to_video_attn``, ``video_to_audio_attn`` (``to_q``, ``to_k``, ``to_v``, ``to_out.0``, 2.3's
  ``to_gate_logits``), ``ff`` and ``audio_ff`` as diffusers names them, but ``patchify_proj``, ``adaln_single``,
  ``av_ca_*_adaln_single`` and ``prompt_adaln_single`` where diffusers says ``proj_in``, ``time_embed``,
  ``av_cross_attn_*`` and ``prompt_adaln``.
* ``model_lora_keys_unet`` (``comfy/lora.py``) maps ``diffusion_model.<name>`` (and, on newer builds, the bare
  ``<name>``) to every model's weights; it has no ``transformer.`` branch for LTX-2 (and ``lora_convert.py`` no
  conversion), so every key of diffusers' file is "not loaded".
* It reads ``<x>.lora_B.weight`` / ``<x>.lora_A.weight`` and applies scale 1.0 without an ``<x>.alpha`` tensor:
  with alpha/r folded into ``lora_B``, 1.0 is the trained strength. No ``.alpha`` is written.
* Lightricks' LTX-2 trainer saves its LoRAs the same way (``diffusion_model.`` + the block names, for ComfyUI), and
  diffusers loads such a file back (``LTX2LoraLoaderMixin.lora_state_dict``: ``diffusion_model.`` keys ->
  ``_convert_non_diffusers_ltx2_lora_to_diffusers``), which is how the tests prove the export exact.
* ComfyUI's own loader, run on the export (``tests/families/ltx2/test_comfyui_loader.py``, upstream commits 3cd7b32f
  and fe251146 of January and February 2026), takes every tensor and patches each weight of its ``LTXAV`` model by
  the trained update. Those commits have no LTX-2.3 layers (``to_gate_logits``, the prompt modulations).

So every layer is written under ``diffusion_model.<its ComfyUI name>`` (``comfyui.json``: the inverse of diffusers'
renames; the blocks' names are unchanged). LoKr and LoHa keep PEFT's tensor names under the same module name; DoRA
is refused (:mod:`dit_lora.output.comfyui_types`).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import cast

from dit_lora.config.schema import FamilyOptions
from dit_lora.families.ltx2.options import LTX2ICOptions
from dit_lora.output.comfyui_types import SUFFIX, RenamedExport, RenameTable

#: diffusers module name (after ``transformer.``) -> Lightricks' (ComfyUI's) name: ``comfyui.json``
TABLE = RenameTable.read(__name__)
_KNOWN = (
    "every Linear layer of LTX2VideoTransformer3DModel: the blocks' six attentions (to_q/to_k/to_v/to_out.0, "
    "to_gate_logits), ff and audio_ff, proj_in/proj_out and their audio twins, the caption projections, the timestep, "
    "cross-modal and prompt modulations"
)
#: ``FamilySpec.exports`` and ``adapter_extras``: every run writes ``<adapter>_comfyui.safetensors`` beside its
#: adapter (the diffusers file loads none of its keys in ComfyUI); ``dit-lora export --format comfyui`` again
EXPORTS = RenamedExport(
    "LTX-2",
    TABLE,
    _KNOWN,
    "diffusion_model.<Lightricks name>.lora_A/lora_B.weight (LoKr: .lokr_w1..., LoHa: .hada_w1_a...); no .alpha: "
    "scale 1.0, alpha/rank is folded into lora_B (lokr_w1, hada_w1_a)",
    "ComfyUI's LTX-2 key names (diffusion_model.transformer_blocks.N.attn1.to_q, ..., Lightricks' names where "
    f"diffusers renamed a layer): <adapter>{SUFFIX} next to the adapter, the strength folded in and no .alpha keys, "
    "so strength 1.0 is the trained one; a LoRA file reproduces the trained output through diffusers' converter; "
    "DoRA is refused (ComfyUI's dora_scale is another normalisation)",
)

#: the adapter metadata key of an IC-LoRA's reference downscale factor (Lightricks' trainer's; what IC-LoRA loaders read)
FACTOR_KEY = "reference_downscale_factor"


def stamp_factor(path: Path, factor: int) -> None:
    """Add ``reference_downscale_factor`` to the safetensors metadata of the adapter file at ``path``, atomically (a
    kill or a full disk leaves the file as it was: ``dit-lora export`` stamps its file in the run's folder)."""
    from safetensors import safe_open
    from safetensors.torch import load_file, save_file

    from dit_lora.core.fileio import atomic_write

    with safe_open(str(path), framework="pt") as handle:
        metadata = dict(handle.metadata() or {})
    metadata[FACTOR_KEY] = json.dumps(factor)
    tensors = load_file(str(path))
    atomic_write(path, lambda tmp: save_file(tensors, str(tmp), metadata=metadata))


def stamped_factor(path: Path) -> int | None:
    """The ``reference_downscale_factor`` in the metadata of the safetensors file at ``path`` (None: none)."""
    from safetensors import safe_open

    if not path.is_file():
        return None
    with safe_open(str(path), framework="pt") as handle:
        value = (handle.metadata() or {}).get(FACTOR_KEY)
    return int(json.loads(value)) if value is not None else None


class ICExports:
    """``FamilySpec.exports`` and ``adapter_extras`` of IC-LoRA: LTX-2's ComfyUI file, with the downscale factor in
    its metadata and in the adapter's (where Lightricks' trainer writes it and diffusers' IC-LoRA docs say to find
    it; whether ComfyUI's nodes read it is not checked)."""

    def __init__(self, exports: RenamedExport, weight_name: str) -> None:
        self.exports, self.weight_name = exports, weight_name

    def export_formats(self) -> dict[str, str]:
        """LTX-2's."""
        return self.exports.export_formats()

    def export_types(self, fmt: str) -> tuple[str, ...]:
        """LTX-2's."""
        return self.exports.export_types(fmt)

    def export_adapter(self, output_dir: Path, fmt: str) -> list[Path]:
        """LTX-2's export, the run's factor (read from its adapter) stamped into what it writes."""
        written = self.exports.export_adapter(output_dir, fmt)
        factor = stamped_factor(Path(output_dir) / self.weight_name)
        if factor is not None:
            for path in written:
                stamp_factor(path, factor)
        return written

    def save_adapter_extras(self, output_dir: Path, comps, options: FamilyOptions) -> None:
        """LTX-2's ComfyUI file, then ``reference_downscale_factor`` in every safetensors file the run wrote (IC-LoRA's
        options hold it)."""
        self.exports.save_adapter_extras(output_dir, comps, options)
        factor = int(cast(LTX2ICOptions, options).reference_downscale_factor)
        for path in sorted(Path(output_dir).glob("*.safetensors")):
            stamp_factor(path, factor)
