"""PixArt-alpha (diffusers ``PixArtTransformer2DModel`` / ``PixArtAlphaPipeline``), a family outside the package:
its :class:`~dit_lora.contract.spec.FamilySpec`.

The components live beside this file, one module each: ``model.py`` (checks, loading, precision, defaults, buckets,
demo), ``encoders.py`` (AutoencoderKL and T5), ``loss.py`` (epsilon prediction on DDPM), ``samples.py``,
``plan.py``, ``adapter.py`` (PEFT's files, loading back, the model card); what a run decides is its ``PixArtRun``
(``state.py``) in ``comps.state``. Precision: transformer and T5 in the run's weight dtype, the AutoencoderKL in
fp32.
"""

from __future__ import annotations

from dit_lora.contract.spec import FamilyInfo, FamilySpec
from dit_lora.families.diffusion.components import DiffusionCaptions, DiffusionData
from dit_lora.output.names import PEFT_ADAPTER_FILE

from .adapter import PixArtAdapter, PixArtCard, PixArtFitting
from .encoders import NAME, PixArtEncoders
from .loss import PixArtLoss
from .model import (
    PixArtBuckets,
    PixArtDefaults,
    PixArtDemo,
    PixArtModel,
    PixArtPrecision,
)
from .plan import PixArtPlan
from .samples import PixArtSamples

#: what the model card, the loader and ``--compile`` say about the toy PixArt family
INFO = FamilyInfo(
    pipeline_class_name="PixArtAlphaPipeline",
    card_tags=("text-to-image", "diffusers", "pixart", "diffusers-training"),
    default_lora_layers=("to_q", "to_k", "to_v", "to_out.0"),
    adapter_weight_name=PEFT_ADAPTER_FILE,
    text_encoder_label="T5",
    block_lists=("transformer_blocks",),
)


def pixart_spec() -> FamilySpec:
    """A new spec of text-to-image PixArt-alpha (tiny random variants built by :mod:`.demo`)."""
    encoders = PixArtEncoders()
    loss = PixArtLoss(encoders)
    buckets = PixArtBuckets()
    fitting = PixArtFitting()
    return FamilySpec(
        name=NAME, info=INFO, model=PixArtModel(INFO), data=DiffusionData(), loss=loss,
        adapter=PixArtAdapter(INFO, fitting), encoders=encoders, captions=DiffusionCaptions(), image_buckets=buckets,
        samples=PixArtSamples(encoders), plan=PixArtPlan(encoders, loss, buckets), card=PixArtCard(),
        defaults=PixArtDefaults(), precision=PixArtPrecision(), demo=PixArtDemo(), fitting=fitting,
    )
