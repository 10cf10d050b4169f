"""Sana's answers to the shared tests (what each case is: tests/support/family_cases.py)."""

from __future__ import annotations

import torch
from loss_probe import B, C, H, W, Probe

from dit_lora.contract.family import Components


def masked_loss_probe(name):
    """Sana's loss on a probe of its transformer's output, the latent grid itself."""
    from diffusers import FlowMatchEulerDiscreteScheduler

    from dit_lora.families.sana.loss import SanaLoss

    comps = Components(model=None, scheduler=FlowMatchEulerDiscreteScheduler(shift=3.0))
    batch = {"prompt_embeds": torch.zeros(B, 3, 8), "prompt_attention_mask": torch.ones(B, 3, dtype=torch.long)}
    return SanaLoss(None), comps, batch, Probe((B, C, H, W)), lambda g: g

#: the Hub id its guide's main example names -> the options that make --demo build a tiny model of it
#: (tests/test_guides.py)
GUIDE_STAND_INS = {"Efficient-Large-Model/Sana_1600M_1024px_BF16_diffusers": {}}

#: which of the shared option groups tests/config/test_owners.py checks it owns (config/owners.py)
SHARED_OPTIONS = {"logit_mean", "weighting_scheme", "complex_human_instruction"}
