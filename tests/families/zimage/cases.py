"""Z-Image's answers to the shared tests (what each case is: tests/support/family_cases.py)."""

from __future__ import annotations

import torch
from loss_probe import B, C, H, W, Probe

from dit_lora.contract.family import Components


def masked_loss_probe(name):
    """Z-Image's loss: its transformer returns a list of ``(C, 1, H, W)``."""
    from diffusers import FlowMatchEulerDiscreteScheduler

    from dit_lora.families.zimage.loss import ZImageLoss

    comps = Components(model=None, scheduler=FlowMatchEulerDiscreteScheduler(shift=3.0))
    batch = {"prompt_embeds": torch.zeros(B, 3, 8), "caption_lengths": [3, 2]}
    probe = Probe((B, C, 1, H, W), wrap=lambda out: list(out.unbind(0)))  # a list of (C, 1, H, W), as Z-Image's
    return ZImageLoss(None), comps, batch, probe, lambda g: g[:, :, 0]


def generic_kernel_probe():
    """Z-Image's tiny transformer (lists in, a list out), captions of two lengths, a timestep each."""
    from dit_lora.families.zimage.demo import build_tiny_zimage_components

    model = build_tiny_zimage_components()["transformer"].float()
    gen = torch.Generator().manual_seed(0)
    channels = model.config.in_channels
    inputs = {
        "x": [torch.randn(channels, 1, 16, 16, generator=gen) for _ in range(2)],
        "t": torch.tensor([0.3, 0.8]),
        "cap_feats": [
            torch.randn(7, model.config.cap_feat_dim, generator=gen),
            torch.randn(11, model.config.cap_feat_dim, generator=gen),
        ],
    }
    return model, inputs, lambda m, kw: torch.stack(m(**kw, return_dict=False)[0])

#: the Hub id its guide's main example names -> the options that make --demo build a tiny model of it
#: (tests/test_guides.py)
GUIDE_STAND_INS = {"Tongyi-MAI/Z-Image": {}}

#: which of the shared option groups tests/config/test_owners.py checks it owns (config/owners.py)
SHARED_OPTIONS = {"logit_mean"}


def comfyui_export():
    """Z-Image (ComfyUI's Lumina2 model): ``transformer.<key>`` of comfy/utils.py ``z_image_to_diffusers``; the
    diffusers file itself loads there."""
    import re

    from comfyui_cases import ComfyUIExport

    from dit_lora.families.zimage.comfyui import EXPORTS

    keys = re.compile(
        r"^transformer\.((layers|context_refiner|noise_refiner)\.\d+\.(attention\.(to_[qkv]|to_out\.0)"
        r"|feed_forward\.w[123]|adaLN_modulation\.0)|all_final_layer\.2-1\.(linear|adaLN_modulation\.1)"
        r"|all_x_embedder\.2-1|cap_embedder\.1|t_embedder\.mlp\.[02])$"
    )
    tiny = dict(in_channels=4, dim=32, n_layers=1, n_refiner_layers=1, n_heads=2, n_kv_heads=2, cap_feat_dim=16,
                axes_dims=[4, 6, 6], axes_lens=[64, 32, 32])
    return ComfyUIExport(keys=keys, convert=EXPORTS.comfyui_state, transformer=("ZImageTransformer2DModel", tiny),
                         lora_file_loads_as_is=True)


def comfyui_loader():
    """Z-Image in ComfyUI's loader: its ZImage model of the same widths; the layers
    tests/families/zimage/test_comfyui_loader.py trains (its LoRA in ComfyUI): all but the timestep MLP."""
    from comfyui_cases import ComfyUILoad

    return ComfyUILoad(
        transformer=("ZImageTransformer2DModel", dict(
            in_channels=4, dim=32, n_layers=2, n_refiner_layers=1, n_heads=2, n_kv_heads=2, cap_feat_dim=16,
            axes_dims=[4, 6, 6], axes_lens=[64, 32, 32])),
        model_class="ZImage",
        unet_config=dict(image_model="lumina2", patch_size=2, in_channels=4, dim=32, cap_feat_dim=16, n_layers=2,
                         n_refiner_layers=1, qk_norm=True, n_heads=2, n_kv_heads=2, axes_dims=[4, 6, 6],
                         axes_lens=[64, 32, 32], rope_theta=256.0, ffn_dim_multiplier=8.0 / 3.0,
                         z_image_modulation=True, time_scale=1000.0, multiple_of=1),
        targets=(r".*(attention\.(to_q|to_k|to_v|to_out\.0)|feed_forward\.w[123]|(layers|noise_refiner)\.\d+\."
                 r"adaLN_modulation\.0|all_x_embedder\.2-1|all_final_layer\.2-1\.linear|cap_embedder\.1)$"),
    )
