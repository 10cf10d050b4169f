"""What the diffusion families share: the component bases (:mod:`.components`), the image-to-video conditioning
image (:mod:`.conditioning`), PEFT's methods for a diffusers model without them (:mod:`.peft_capable`), and
TRANSITIONALLY the old-style :class:`~dit_lora.families.diffusion.composite.DiffusionFamily` (:mod:`.composite`).

The names below are those the not-yet-converted families (DiT, Wan, CogVideoX, the toy family) import from here.
"""

from dit_lora.families.diffusion.composite import DiffusionFamily
from dit_lora.families.diffusion.conditioning import (
    kept_conditioning_image,
    load_conditioning_image,
    run_conditioning_image,
)
from dit_lora.families.diffusion.peft_capable import make_peft_capable

__all__ = ["DiffusionFamily", "kept_conditioning_image", "load_conditioning_image", "make_peft_capable",
           "run_conditioning_image"]
