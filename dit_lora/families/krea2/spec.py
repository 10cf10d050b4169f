"""Krea 2 (diffusers ``Krea2Transformer2DModel`` / ``Krea2Pipeline``; Krea AI's krea/Krea-2-Raw): its
:class:`~dit_lora.contract.spec.FamilySpec`.

The components live beside this file, one module each: ``model.py`` (checks, Turbo refused, loading, the tapped
layers, demo), ``encoders.py`` (the Qwen-Image VAE's normalised latents, Qwen3-VL's stacked hidden states and their
mask through the pipeline's own ``encode_prompt``), ``loss.py`` (rectified flow with the pipeline's dynamic shift, no
guidance embedding), ``samples.py``, ``plan.py``, ``adapter.py`` (the model card); what a run decides is its
``Krea2Run`` (``state.py``). Precision: transformer and Qwen3-VL in bf16 (the transformer's norms in fp32, its own
``_keep_in_fp32_modules``), the VAE in fp32. Fused kernels: no block of its own is patched.
"""

from __future__ import annotations

from dit_lora.contract.spec import FamilyInfo, FamilySpec
from dit_lora.families.krea2.adapter import Krea2Card
from dit_lora.families.krea2.encoders import Krea2Encoders
from dit_lora.families.krea2.loss import Krea2Loss
from dit_lora.families.krea2.model import DEMO, PARTS, Krea2Model
from dit_lora.families.krea2.plan import Krea2Plan
from dit_lora.families.krea2.samples import Krea2Samples
from dit_lora.families.krea2.state import run_state
from dit_lora.kit.adapter import KitAdapter
from dit_lora.kit.builder import diffusion_spec
from dit_lora.kit.packed import BUCKETS
from dit_lora.kit.text_conditioned import TextSettingsSetup

#: diffusers' train_dreambooth_lora_krea2.py default targets (its comment: narrow to attention for long runs)
LORA_LAYERS = (
    "img_in", "final_layer.linear", "to_q", "to_k", "to_v", "to_out.0", "to_gate", "ff.up", "ff.down",
    "text_fusion.projector", "txt_in.linear_1", "txt_in.linear_2", "time_embed.linear_1", "time_embed.linear_2",
    "time_mod_proj",
)  # fmt: skip

#: what the model card, the loader and the levers say about Krea 2
INFO = FamilyInfo(
    pipeline_class_name="Krea2Pipeline",
    card_tags=("text-to-image", "diffusers", "krea2", "diffusers-training"),
    pipeline_tag="text-to-image",
    default_lora_layers=LORA_LAYERS,
    text_encoder_label="Qwen3-VL",
    # a 12.9B single-stream transformer at 1024 px: on by default, as for FLUX.1
    gradient_checkpointing_default=True,
    block_lists=("transformer_blocks",),
)


def krea2_spec(name: str = "krea2") -> FamilySpec:
    """A new Krea 2 spec: Krea-2-Raw (and the tiny random variant of the tests), its parts wired by the kit's
    :func:`~dit_lora.kit.builder.diffusion_spec`: the reload decodes in fp32, as trained. No defaults: the
    transformer config carries no trained size (the catalogue's entry does)."""
    encoders = Krea2Encoders()
    return diffusion_spec(
        name,
        INFO,
        model=Krea2Model(INFO, PARTS),
        encoders=encoders,
        loss=Krea2Loss,
        samples=Krea2Samples,
        plan=Krea2Plan,
        adapter=KitAdapter(INFO, fp32_vae="AutoencoderKLQwenImage"),
        image_buckets=BUCKETS,
        card=Krea2Card(INFO),
        setup=TextSettingsSetup(encoders, run_state),
        demo=DEMO,
    )
