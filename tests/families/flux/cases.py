"""FLUX.1's answers to the shared tests (what each case is: tests/support/family_cases.py)."""

from __future__ import annotations

import torch
from loss_probe import B, C, H, W, Probe

from dit_lora.contract.family import Components


def masked_loss_probe(name):
    """FLUX.1's loss on packed 2 x 2 tokens; Kontext's with the control's tokens after the target's, context only."""
    from dit_lora.families.flux.edit import KontextLoss
    from dit_lora.families.flux.loss import FluxLoss
    from dit_lora.families.flux.state import FluxRun
    from dit_lora.kit.packed import unpack

    kontext = name == "flux_kontext"
    comps = Components(model=None, state=FluxRun(scheduler_config={}, guidance_embeds=False))
    batch = {"prompt_embeds": torch.zeros(B, 3, 8), "pooled_prompt_embeds": torch.zeros(B, 4)}
    tokens = (H // 2) * (W // 2)
    if kontext:  # the control's tokens follow the target's, context only
        batch["control_latents"] = torch.randn(B, C, H, W)

    def to_grid(g):
        assert (g[:, tokens:] == 0).all()  # the control's tokens get no gradient
        return unpack(g[:, :tokens], H, W)

    probe = Probe((B, tokens * (2 if kontext else 1), 4 * C))
    return (KontextLoss if kontext else FluxLoss)(None), comps, batch, probe, to_grid


def generic_kernel_probe():
    """FLUX.1's tiny transformer, batch 2 with a timestep each: the generic points' inputs and call."""
    from dit_lora.families.flux.demo import build_tiny_flux_components
    from dit_lora.kit.packed import latent_ids, pack

    model = build_tiny_flux_components()["transformer"].float()
    gen = torch.Generator().manual_seed(0)
    latents = torch.randn(2, model.config.in_channels // 4, 8, 8, generator=gen)
    inputs = {
        "hidden_states": pack(latents),
        "encoder_hidden_states": torch.randn(2, 5, model.config.joint_attention_dim, generator=gen),
        "pooled_projections": torch.randn(2, model.config.pooled_projection_dim, generator=gen),
        "timestep": torch.tensor([0.3, 0.8]),
        "guidance": torch.tensor([1.0, 1.0]),
        "txt_ids": torch.zeros(5, 3),
        "img_ids": latent_ids(4, 4, "cpu", torch.float32),
    }
    return model, inputs, lambda m, kw: m(**kw, return_dict=False)[0]

#: the Hub id its guide's main example names -> the options that make --demo build a tiny model of it
#: (tests/test_guides.py)
GUIDE_STAND_INS = {"black-forest-labs/FLUX.1-dev": {}}

#: which of the shared option groups tests/config/test_owners.py checks it owns (config/owners.py)
SHARED_OPTIONS = {
    "flux": {"logit_mean", "weighting_scheme"},
    "flux_kontext": {"logit_mean", "weighting_scheme", "validation_image"},
}
