"""Sana (diffusers ``SanaTransformer2DModel`` / ``SanaPipeline``): its :class:`~dit_lora.contract.spec.FamilySpec`.

The components live beside this file, one module each: ``model.py`` (checks, loading, precision, defaults, notes,
buckets, demo), ``encoders.py`` (DC-AE and Gemma-2, the run's text settings), ``loss.py`` (rectified flow, the
cached caption length), ``samples.py``, ``plan.py``, ``adapter.py`` (saving, loading back, the model card),
``kernels.py`` (fused-kernel patch points); what a run decides is its ``SanaRun`` (``state.py``) in
``comps.state``. Precision: transformer and Gemma-2 in bf16, DC-AE in fp32.
"""

from __future__ import annotations

from dit_lora.contract.spec import FamilyInfo, FamilySpec
from dit_lora.families.sana.adapter import SANA_VAE
from dit_lora.families.sana.encoders import max_sequence_length
from dit_lora.families.sana.kernels import patch_points
from dit_lora.families.sana.model import SanaBuckets, SanaDefaults, SanaNotes
from dit_lora.families.sana.state import run_state
from dit_lora.kit.adapter import KitAdapter
from dit_lora.kit.builder import PatchPoints, folder_spec
from dit_lora.kit.text_padding import TrimmedTextData

#: what the model card, the loader and ``--compile`` say about Sana
INFO = FamilyInfo(
    pipeline_class_name="SanaPipeline",
    card_tags=("text-to-image", "diffusers", "sana", "diffusers-training"),
    default_lora_layers=("to_q", "to_k", "to_v", "to_out.0"),
    text_encoder_label="Gemma-2",
    block_lists=("transformer_blocks",),
)


def sana_spec(name: str = "sana") -> FamilySpec:
    """A new Sana spec: text-to-image Sana 600M / 1.6B (and the tiny random variants of the tests); its folder's parts
    (:func:`~dit_lora.kit.builder.folder_spec`) and what it adds: the trimmed caption padding, the
    fp32 VAE of the reload, its buckets, fused-kernel patch points, defaults and notes."""
    text = TrimmedTextData(max_sequence_length, run_state, option="trim_text_padding")
    adapter = KitAdapter(INFO, fp32_vae=SANA_VAE)
    return folder_spec(
        name,
        INFO,
        __package__,
        data=text,
        adapter=adapter,
        image_buckets=SanaBuckets(),
        kernels=PatchPoints(patch_points),
        defaults=SanaDefaults(),
        notes=SanaNotes(),
    )
