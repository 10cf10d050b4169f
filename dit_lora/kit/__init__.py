"""The family kit: what the diffusion families share. The spec builder (:mod:`.builder`), the component bases
(:mod:`.components`), the image-to-video conditioning image (:mod:`.conditioning`), PEFT's methods for a diffusers
model without them (:mod:`.peft_capable`) and the rest a family's folder imports. It registers no family: families
live under :mod:`dit_lora.families`, one package each, above this layer (pyproject's import contract).
"""

from dit_lora.kit.conditioning import (
    kept_conditioning_image,
    load_conditioning_image,
)
from dit_lora.kit.peft_capable import make_peft_capable

__all__ = ["kept_conditioning_image", "load_conditioning_image", "make_peft_capable"]
