"""Ideogram 4's answers to the shared tests (what each case is: tests/support/family_cases.py)."""

from __future__ import annotations

import torch
from loss_probe import B, C, H, W, Probe

from dit_lora.contract.family import Components


def masked_loss_probe(name):
    """Ideogram 4's loss on its caption-and-image sequence: the caption's places get no gradient."""
    from dit_lora.families.ideogram4.loss import Ideogram4Loss

    batch = {"prompt_embeds": torch.zeros(B, 3, 8), "caption_lengths": [3, 2]}  # the batch padded to its longest
    text = 3

    def to_grid(g):
        assert (g[:, :text] == 0).all()  # the caption's places get no gradient
        return g[:, text:].transpose(1, 2).reshape(B, C, H, W)

    return Ideogram4Loss(None), Components(model=None), batch, Probe((B, text + H * W, C)), to_grid


def generic_kernel_probe():
    """Ideogram 4's tiny transformer on its packed caption-and-image sequence, batch 2 with a timestep each."""
    from dit_lora.families.ideogram4.demo import build_tiny_ideogram4_components
    from dit_lora.families.ideogram4.loss import sequence

    model = build_tiny_ideogram4_components()["transformer"].float()
    gen = torch.Generator().manual_seed(0)
    latents = torch.randn(2, model.config.in_channels, 2, 3, generator=gen)
    features = torch.randn(2, 5, model.config.llm_features_dim, generator=gen)
    inputs = {**sequence(latents, features, [3, 5]), "timestep": torch.tensor([0.3, 0.8])}
    return model, inputs, lambda m, kw: m(**kw, return_dict=False)[0]

#: the Hub id its guide's main example names -> the options that make --demo build a tiny model of it
#: (tests/test_guides.py)
GUIDE_STAND_INS = {"ideogram-ai/ideogram-v4": {}}

#: which of the shared option groups tests/config/test_owners.py checks it owns (config/owners.py)
SHARED_OPTIONS = {"logit_mean", "weighting_scheme"}
