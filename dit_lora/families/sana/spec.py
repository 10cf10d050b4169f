"""Sana (diffusers ``SanaTransformer2DModel`` / ``SanaPipeline``): its :class:`~dit_lora.contract.spec.FamilySpec`.

The components live beside this file, one module each: ``model.py`` (checks, loading, precision, defaults, notes,
buckets, demo), ``encoders.py`` (DC-AE and Gemma-2, the run's text settings), ``loss.py`` (rectified flow, the
cached caption length), ``samples.py``, ``plan.py``, ``adapter.py`` (saving, loading back, the model card),
``kernels.py`` (fused-kernel patch points); what a run decides is its ``SanaRun`` (``state.py``) in
``comps.state``. Precision: transformer and Gemma-2 in bf16, DC-AE in fp32.
"""

from __future__ import annotations

from dit_lora.contract.spec import FamilyInfo, FamilySpec
from dit_lora.families.sana.adapter import SANA_VAE, SanaCard
from dit_lora.families.sana.encoders import SanaEncoders, max_sequence_length
from dit_lora.families.sana.kernels import patch_points
from dit_lora.families.sana.loss import SanaLoss
from dit_lora.families.sana.model import DEMO, PARTS, SanaBuckets, SanaDefaults, SanaModel, SanaNotes
from dit_lora.families.sana.plan import SanaPlan
from dit_lora.families.sana.samples import SanaSamples
from dit_lora.families.sana.state import run_state
from dit_lora.kit.adapter import KitAdapter
from dit_lora.kit.builder import PatchPoints, diffusion_spec
from dit_lora.kit.text_conditioned import TextSettingsSetup
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
    """A new Sana spec: text-to-image Sana 600M / 1.6B (and the tiny random variants of the tests), its parts wired
    by the kit's :func:`~dit_lora.kit.builder.diffusion_spec`: the trimmed caption padding, the fp32 VAE of the
    reload, its buckets, fused-kernel patch points, defaults and notes."""
    encoders = SanaEncoders()
    return diffusion_spec(
        name,
        INFO,
        model=SanaModel(INFO, PARTS),
        encoders=encoders,
        loss=SanaLoss,
        samples=SanaSamples,
        plan=SanaPlan,
        data=TrimmedTextData(max_sequence_length, run_state, option="trim_text_padding"),
        adapter=KitAdapter(INFO, fp32_vae=SANA_VAE),
        image_buckets=SanaBuckets(),
        kernels=PatchPoints(patch_points),
        card=SanaCard(INFO),
        defaults=SanaDefaults(),
        notes=SanaNotes(),
        setup=TextSettingsSetup(encoders, run_state),
        demo=DEMO,
    )
