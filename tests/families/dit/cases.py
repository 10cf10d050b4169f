"""DiT's answers to the shared tests (what each case is: tests/support/family_cases.py)."""

from __future__ import annotations

import torch
from loss_probe import B, C, H, W, Probe

from dit_lora.contract.family import Components


def masked_loss_probe(name):
    """DiT's loss: with a learned sigma the probe predicts 2C channels; the variance half never reaches the loss (no
    VLB term)."""
    from diffusers import DDPMScheduler

    from dit_lora.families.dit.loss import DiTLoss
    from dit_lora.families.dit.state import DiTRun

    state = DiTRun(learned_sigma=True, in_channels=C, null_class=10)
    comps = Components(model=None, scheduler=DDPMScheduler(num_train_timesteps=1000), state=state)
    return DiTLoss(None), comps, {"class_labels": torch.zeros(B, dtype=torch.long)}, Probe((B, 2 * C, H, W)), (
        lambda g: g[:, :C]
    )

#: the Hub id its guide's main example names -> the options that make --demo build a tiny model of it
#: (tests/test_guides.py)
GUIDE_STAND_INS = {"facebook/DiT-XL-2-256": {"revision": None}}  # the Hub's safetensors branch; a local folder has none

#: which of the shared option groups tests/config/test_owners.py checks it owns (config/owners.py)
SHARED_OPTIONS = frozenset()
