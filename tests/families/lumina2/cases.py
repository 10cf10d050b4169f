"""Lumina 2's answers to the shared tests (what each case is: tests/support/family_cases.py)."""

from __future__ import annotations

import torch
from loss_probe import B, C, H, W, Probe

from dit_lora.contract.family import Components


def masked_loss_probe(name):
    """Lumina 2's loss on its latent grid, on the checkpoint's shifted training schedule."""
    from dit_lora.families.lumina2.loss import Lumina2Loss
    from dit_lora.families.lumina2.state import Lumina2Run
    from dit_lora.modeling.flow_matching import training_scheduler

    comps = Components(model=None, scheduler=training_scheduler({"shift": 6.0}), state=Lumina2Run())
    batch = {"prompt_embeds": torch.zeros(B, 3, 8), "prompt_attention_mask": torch.ones(B, 3, dtype=torch.long)}
    return Lumina2Loss(None), comps, batch, Probe((B, C, H, W)), lambda g: g


def generic_kernel_probe():
    """Lumina 2's tiny transformer with a caption mask, batch 2 with a timestep each."""
    from dit_lora.families.lumina2.demo import build_tiny_lumina2_components

    model = build_tiny_lumina2_components()["transformer"].float()
    gen = torch.Generator().manual_seed(0)
    inputs = {
        "hidden_states": torch.randn(2, model.config.in_channels, 8, 8, generator=gen),
        "timestep": torch.tensor([0.3, 0.8]),
        "encoder_hidden_states": torch.randn(2, 6, model.config.cap_feat_dim, generator=gen),
        "encoder_attention_mask": (torch.arange(6).expand(2, 6) < torch.tensor([[3], [6]])).long(),
    }
    return model, inputs, lambda m, kw: m(**kw, return_dict=False)[0]

#: the Hub id its guide's main example names -> the options that make --demo build a tiny model of it
#: (tests/test_guides.py)
GUIDE_STAND_INS = {"Alpha-VLLM/Lumina-Image-2.0": {}}

#: which of the shared option groups tests/config/test_owners.py checks it owns (config/owners.py)
SHARED_OPTIONS = {"logit_mean", "weighting_scheme"}


def comfyui_export():
    """Lumina 2 (Lumina-Image 2.0, ComfyUI commit a125cd84): only the generic names of comfy/ldm/lumina/model.py NextDiT
    (q/k/v fused in ``attention.qkv``); every type: each of its 3 blocks' q/k/v into one."""
    import re

    from comfyui_cases import ComfyUIExport

    from dit_lora.families.lumina2.comfyui import EXPORT

    keys = re.compile(
        r"^diffusion_model\.((layers|noise_refiner|context_refiner)\.\d+\.(attention\.(qkv|out)|feed_forward\.w[123]"
        r"|adaLN_modulation\.1)|x_embedder|cap_embedder\.1|t_embedder\.mlp\.[02]|final_layer\.(adaLN_modulation\.1|linear))$"
    )
    tiny = dict(  # 6 query heads over 2 key/value heads: the real 3:1
        sample_size=8, patch_size=2, in_channels=4, hidden_size=48, num_layers=1, num_refiner_layers=1,
        num_attention_heads=6, num_kv_heads=2, multiple_of=16, axes_dim_rope=[2, 2, 4], cap_feat_dim=16)
    return ComfyUIExport(keys=keys, convert=EXPORT.comfyui_state, transformer=("Lumina2Transformer2DModel", tiny),
                         exported_at=EXPORT.typed_layer_name, fused=lambda kind: 3 * 2, typed_fused=EXPORT)


#: ComfyUI's own loader reads its export in its own folder's test
NO_COMFYUI_LOADER = "ComfyUI's own loader reads its export in tests/families/lumina2/test_comfyui.py"
