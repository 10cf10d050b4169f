"""Qwen-Image's answers to the shared tests (what each case is: tests/support/family_cases.py)."""

from __future__ import annotations

import torch
from loss_probe import B, C, H, W, Probe

from dit_lora.contract.family import Components


def masked_loss_probe(name):
    """Qwen-Image's loss on packed 2 x 2 tokens; Edit's with one control image, whose tokens follow the target's and
    are context only."""
    from dit_lora.families.qwenimage.edit import EditLoss
    from dit_lora.families.qwenimage.loss import QwenImageLoss, pack_latents
    from dit_lora.families.qwenimage.state import QwenImageRun

    edit = name == "qwenimage_edit"
    comps = Components(model=None, state=QwenImageRun(scheduler_config={}))
    batch = {"prompt_embeds": torch.zeros(B, 3, 8), "prompt_embeds_mask": torch.ones(B, 3, dtype=torch.long)}
    tokens = (H // 2) * (W // 2)
    if edit:  # one control image: its tokens follow the target's, context only
        batch["control_latents"] = torch.randn(B, 1, C, H, W)
    probe = Probe((B, tokens * (2 if edit else 1), 4 * C))

    def to_grid(g):  # the target's tokens back to (B, C, H, W), checking the control tokens got nothing
        if edit:
            assert (g[:, tokens:] == 0).all()
        packed = g[:, :tokens].reshape(B, H // 2, W // 2, C, 2, 2).permute(0, 3, 1, 4, 2, 5)
        grid = packed.reshape(B, C, H, W)
        assert torch.equal(pack_latents(grid), g[:, :tokens])  # the inverse of the family's packing
        return grid

    return (EditLoss if edit else QwenImageLoss)(None), comps, batch, probe, to_grid


#: Edit-Plus's loss is Edit's (one EditLoss, more control images): probed as Edit
MASKED_LOSS_SAME = {"qwenimage_edit_plus": "qwenimage_edit"}


def generic_kernel_probe():
    """Qwen-Image's tiny transformer (diffusers' ``RMSNorm`` q/k norms), batch 2 with a timestep each."""
    from dit_lora.families.qwenimage.demo import build_tiny_qwenimage_components

    model = build_tiny_qwenimage_components()["transformer"].float()
    gen = torch.Generator().manual_seed(0)
    inputs = {
        "hidden_states": torch.randn(2, 16, model.config.in_channels, generator=gen),
        "encoder_hidden_states": torch.randn(2, 7, model.config.joint_attention_dim, generator=gen),
        "encoder_hidden_states_mask": torch.ones(2, 7, dtype=torch.long),
        "timestep": torch.tensor([0.3, 0.8]),
        "img_shapes": [(1, 4, 4)] * 2,
    }
    return model, inputs, lambda m, kw: m(**kw, return_dict=False)[0]

#: the Hub id its guide's main example names -> the options that make --demo build a tiny model of it
#: (tests/test_guides.py)
GUIDE_STAND_INS = {"Qwen/Qwen-Image": {}}

#: which of the shared option groups tests/config/test_owners.py checks it owns (config/owners.py)
SHARED_OPTIONS = {
    "qwenimage": {"logit_mean", "weighting_scheme"},
    "qwenimage_edit": {"logit_mean", "weighting_scheme", "validation_image"},
    "qwenimage_edit_plus": {"logit_mean", "weighting_scheme", "validation_image"},
}


def comfyui_export():
    """Qwen-Image: ``transformer.<weight>`` of comfy/ldm/qwen_image/model.py (diffusers' names); the diffusers file
    itself loads there."""
    import re

    from comfyui_cases import ComfyUIExport

    from dit_lora.families.qwenimage.comfyui import EXPORTS

    keys = re.compile(
        r"^transformer\.(transformer_blocks\.\d+\.(attn\.(to_[qkv]|to_out\.0|add_[qkv]_proj|to_add_out)"
        r"|(img|txt)_mlp\.net\.(0\.proj|2)|(img|txt)_mod\.1)|img_in|txt_in|proj_out|norm_out\.linear"
        r"|time_text_embed\.timestep_embedder\.linear_[12])$"
    )
    tiny = dict(patch_size=2, in_channels=16, out_channels=4, num_layers=1, attention_head_dim=16,
                num_attention_heads=2, joint_attention_dim=32, axes_dims_rope=(4, 6, 6))
    return ComfyUIExport(keys=keys, convert=EXPORTS.comfyui_state, transformer=("QwenImageTransformer2DModel", tiny),
                         lora_file_loads_as_is=True)


def comfyui_loader():
    """Qwen-Image in ComfyUI's loader: its QwenImage model of the same widths."""
    from comfyui_cases import ComfyUILoad

    return ComfyUILoad(
        transformer=("QwenImageTransformer2DModel", dict(
            patch_size=2, in_channels=16, out_channels=4, num_layers=2, attention_head_dim=16, num_attention_heads=2,
            joint_attention_dim=32, axes_dims_rope=(4, 6, 6))),
        model_class="QwenImage",
        unet_config=dict(image_model="qwen_image", in_channels=16, out_channels=4, num_layers=2,
                         attention_head_dim=16, num_attention_heads=2, joint_attention_dim=32,
                         axes_dims_rope=(4, 6, 6)),
    )

#: names without a demo config of their own -> what covers them (tests/conformance): Edit's step is Edit-Plus's (one
#: EditLoss), and its card is checked on Edit-Plus's demo run (CARD_ON_RUN_OF)
NO_DEMO = {"qwenimage_edit": "qwenimage_edit_plus"}
CARD_ON_RUN_OF = {"qwenimage_edit": "qwenimage_edit_plus"}
