"""Sana's memory plan (:class:`~dit_lora.kit.caption_plan.CaptionPlan`): its components from their
configs on the meta device and the cached text conditioning."""

from __future__ import annotations

from dit_lora.families.sana.encoders import max_sequence_length
from dit_lora.families.sana.state import SanaRun
from dit_lora.kit.caption_plan import CaptionPlan


class SanaPlan(CaptionPlan):
    """``FamilySpec.plan``: transformer, DC-AE and Gemma-2 on the meta device; the caption embeddings padded to the
    run's text length, with their mask."""

    transformer, vae, state = "SanaTransformer2DModel", "AutoencoderDC", SanaRun
    mask = "prompt_attention_mask"
    text_length = staticmethod(max_sequence_length)
