"""Ideogram 4 (diffusers ``Ideogram4Transformer2DModel`` / ``Ideogram4Pipeline``; ideogram-ai/ideogram-v4): its
:class:`~dit_lora.contract.spec.FamilySpec`.

The components live beside this file, one module each: ``model.py`` (checks, loading with the unconditional
transformer for samples, precision, demo), ``encoders.py`` (FLUX.2's VAE's latents patched as the pipeline packs
them, Qwen3-VL's tapped hidden states through the pipeline's own ``encode_prompt``, cached ragged), ``loss.py``
(the pipeline's packed sequence, its resolution-aware logit-normal sigmas, reversed time), ``samples.py`` (the stock
pipeline's asymmetric guidance), ``plan.py``, ``adapter.py`` (the model card); what a run decides is its
``Ideogram4Run`` (``state.py``). Precision: transformer and Qwen3-VL in bf16, the VAE in fp32, the transformer run
without autocast. Fused kernels: no block of its own is patched; the generic points patch its diffusers ``RMSNorm``s
and the output ``LayerNorm`` (``tests/kernels/test_patch_image_families.py``).
"""

from __future__ import annotations

from dit_lora.contract.spec import FamilyInfo, FamilySpec
from dit_lora.families.ideogram4.adapter import Ideogram4Card
from dit_lora.families.ideogram4.encoders import Ideogram4Encoders
from dit_lora.families.ideogram4.loss import Ideogram4Loss
from dit_lora.families.ideogram4.model import DEMO, PARTS, Ideogram4Defaults, Ideogram4Model
from dit_lora.families.ideogram4.plan import Ideogram4Plan
from dit_lora.families.ideogram4.samples import Ideogram4Samples
from dit_lora.families.ideogram4.state import run_state
from dit_lora.kit.adapter import KitAdapter
from dit_lora.kit.builder import diffusion_spec
from dit_lora.kit.packed import BUCKETS
from dit_lora.kit.text_conditioned import TextSettingsSetup

#: what the model card, the loader and the levers say about Ideogram 4
INFO = FamilyInfo(
    pipeline_class_name="Ideogram4Pipeline",
    card_tags=("text-to-image", "diffusers", "ideogram4", "diffusers-training"),
    pipeline_tag="text-to-image",
    # diffusers' train_dreambooth_lora_ideogram4.py: the blocks' attention and SwiGLU feed-forwards
    default_lora_layers=("to_q", "to_k", "to_v", "to_out.0", "w1", "w2", "w3"),
    text_encoder_label="Qwen3-VL",
    # a 9B single-stream transformer over caption and image tokens at 1024 px: on by default, as for FLUX.1
    gradient_checkpointing_default=True,
    # --compile: the sequence is the batch's longest caption plus the image tokens, a length that changes
    compile_dynamic=True,
    block_lists=("layers",),
)


def ideogram4_spec(name: str = "ideogram4") -> FamilySpec:
    """A new Ideogram 4 spec: ideogram-v4 (and the tiny random variant of the tests), its parts wired by the kit's
    :func:`~dit_lora.kit.builder.diffusion_spec`: the reload decodes in fp32, as trained, and the defaults its
    model takes from its configs."""
    encoders = Ideogram4Encoders()
    return diffusion_spec(
        name,
        INFO,
        model=Ideogram4Model(INFO, PARTS),
        encoders=encoders,
        loss=Ideogram4Loss,
        samples=Ideogram4Samples,
        plan=Ideogram4Plan,
        adapter=KitAdapter(INFO, fp32_vae="AutoencoderKLFlux2"),
        image_buckets=BUCKETS,
        card=Ideogram4Card(INFO),
        defaults=Ideogram4Defaults(),
        setup=TextSettingsSetup(encoders, run_state),
        demo=DEMO,
    )
