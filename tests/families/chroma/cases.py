"""Chroma's answers to the shared tests (what each case is: tests/support/family_cases.py)."""

from __future__ import annotations

import torch
from loss_probe import B, C, H, W, Probe

from dit_lora.contract.family import Components


def masked_loss_probe(name):
    """Chroma's loss on FLUX.1's packed tokens, with its boolean caption mask."""
    from dit_lora.families.chroma.loss import ChromaLoss
    from dit_lora.families.chroma.state import ChromaRun
    from dit_lora.kit.packed import unpack

    comps = Components(model=None, state=ChromaRun(scheduler_config={}))
    batch = {"prompt_embeds": torch.zeros(B, 3, 8), "prompt_attention_mask": torch.ones(B, 3, dtype=torch.bool)}
    return ChromaLoss(None), comps, batch, Probe((B, (H // 2) * (W // 2), 4 * C)), lambda g: unpack(g, H, W)


def generic_kernel_probe():
    """Chroma's tiny transformer with its caption mask, batch 2 with a timestep each."""
    from dit_lora.families.chroma.demo import build_tiny_chroma_components
    from dit_lora.families.chroma.loss import transformer_mask
    from dit_lora.kit.packed import latent_ids, pack

    model = build_tiny_chroma_components()["transformer"].float()
    gen = torch.Generator().manual_seed(0)
    latents = torch.randn(2, model.config.in_channels // 4, 8, 8, generator=gen)
    caption_mask = torch.arange(5).expand(2, 5) <= torch.tensor([[2], [4]])
    inputs = {
        "hidden_states": pack(latents),
        "encoder_hidden_states": torch.randn(2, 5, model.config.joint_attention_dim, generator=gen),
        "timestep": torch.tensor([0.3, 0.8]),
        "txt_ids": torch.zeros(5, 3),
        "img_ids": latent_ids(4, 4, "cpu", torch.float32),
        "attention_mask": transformer_mask(caption_mask, 16),
    }
    return model, inputs, lambda m, kw: m(**kw, return_dict=False)[0]

#: the Hub id its guide's main example names -> the options that make --demo build a tiny model of it
#: (tests/test_guides.py)
GUIDE_STAND_INS = {"lodestones/Chroma1-HD": {}}

#: which of the shared option groups tests/config/test_owners.py checks it owns (config/owners.py)
SHARED_OPTIONS = {"logit_mean", "weighting_scheme"}

#: why tests/kit/test_prompts.py does not look for its caption length in the card's pipeline call
NO_CARD_CAPTION_LENGTH = (
    "its snippet encodes the prompts first, pipe.encode_prompt(..., max_sequence_length=<the trained length>) at any "
    "length, and the call takes the embeddings (tests/families/chroma/test_adapter.py)"
)
