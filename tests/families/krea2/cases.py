"""Krea 2's answers to the shared tests (what each case is: tests/support/family_cases.py)."""

from __future__ import annotations

import torch
from loss_probe import B, C, H, W, Probe

from dit_lora.contract.family import Components


def masked_loss_probe(name):
    """Krea 2's loss on packed 2 x 2 tokens, its captions stacked text-encoder taps."""
    from dit_lora.families.krea2.loss import Krea2Loss
    from dit_lora.families.krea2.state import Krea2Run
    from dit_lora.kit.packed import unpack

    comps = Components(model=None, state=Krea2Run(scheduler_config={}))
    batch = {"prompt_embeds": torch.zeros(B, 3, 2, 8), "prompt_embeds_mask": torch.ones(B, 3, dtype=torch.bool)}
    return Krea2Loss(None), comps, batch, Probe((B, (H // 2) * (W // 2), 4 * C)), lambda g: unpack(g, H, W)


#: Krea 2's norms are its own ``Krea2RMSNorm``, no library class: the generic points patch nothing
#: (tests/families/krea2/test_kernels.py shows it, bit for bit)
NO_GENERIC_KERNEL_PROBE = "its norms are its own Krea2RMSNorm: tests/families/krea2/test_kernels.py"

#: the Hub id its guide's main example names -> the options that make --demo build a tiny model of it
#: (tests/test_guides.py)
GUIDE_STAND_INS = {"krea/Krea-2-Raw": {}}

#: which of the shared option groups tests/config/test_owners.py checks it owns (config/owners.py)
SHARED_OPTIONS = {"logit_mean", "weighting_scheme"}
