"""What the diffusion families share: the component bases (:mod:`.components`), the image-to-video conditioning
image (:mod:`.conditioning`) and PEFT's methods for a diffusers model without them (:mod:`.peft_capable`).

Shared bases, not a family: this package registers no family (``FAMILY_PACKAGE = False`` below tells
``tests/test_registry.py`` so).
"""

from dit_lora.families.diffusion.conditioning import (
    kept_conditioning_image,
    load_conditioning_image,
)
from dit_lora.families.diffusion.peft_capable import make_peft_capable

#: this package holds the bases the families share and registers no family of its own
FAMILY_PACKAGE = False

__all__ = ["FAMILY_PACKAGE", "kept_conditioning_image", "load_conditioning_image", "make_peft_capable"]
