"""Z-Image's memory plan (:class:`~dit_lora.kit.caption_plan.CaptionPlan`): its components from their
configs on the meta device and the cached caption embeddings at the run's full caption length (the longest a batch
can hold; no ``caption_lengths``: every caption is full)."""

from __future__ import annotations

from dit_lora.families.zimage.encoders import max_sequence_length
from dit_lora.families.zimage.state import ZImageRun
from dit_lora.kit.caption_plan import CaptionPlan


class ZImagePlan(CaptionPlan):
    """``FamilySpec.plan``: transformer, FLUX.1 VAE and Qwen3 on the meta device; the main ``layers`` are the
    blocks the planner counts (the two refiner stacks run once each, at every depth)."""

    depth_key = ("transformer/config.json", "n_layers")
    transformer, vae, state = "ZImageTransformer2DModel", "AutoencoderKL", ZImageRun
    text_length = staticmethod(max_sequence_length)
