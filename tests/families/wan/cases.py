"""Wan's answers to the shared tests (what each case is: tests/support/family_cases.py)."""

from __future__ import annotations

#: the Hub id its guide's main example names -> the options that make --demo build a tiny model of it
#: (tests/test_guides.py)
GUIDE_STAND_INS = {"Wan-AI/Wan2.1-T2V-1.3B-Diffusers": {"demo_wan_variant": "2.1-t2v"}}

#: which of the shared option groups tests/config/test_owners.py checks it owns (config/owners.py)
SHARED_OPTIONS = {
    "wan": {"logit_mean"},
    "wan_i2v": {"logit_mean", "validation_image"},
}


#: the tiny WanTransformer3DModel of the ComfyUI tests (one block, an image projection: the I2V layers too)
_COMFYUI_TINY = dict(
    patch_size=(1, 2, 2), num_attention_heads=2, attention_head_dim=8, in_channels=4, out_channels=4,
    text_dim=16, freq_dim=16, ffn_dim=32, num_layers=1, cross_attn_norm=True, rope_max_seq_len=32,
    image_dim=12, added_kv_proj_dim=16)


def comfyui_export():
    """Wan: only the generic ``diffusion_model.<weight>`` of comfy/ldm/wan/model.py WanModel."""
    import re

    from comfyui_cases import ComfyUIExport

    from dit_lora.families.wan import comfyui

    keys = re.compile(
        r"^diffusion_model\.(blocks\.\d+\.(self_attn\.[qkvo]|cross_attn\.([qkvo]|k_img|v_img)|ffn\.[02])"
        r"|text_embedding\.[02]|time_embedding\.[02]|time_projection\.1|head\.head|img_emb\.proj\.[13])$"
    )
    return ComfyUIExport(keys=keys, convert=comfyui.comfyui_state, transformer=("WanTransformer3DModel", _COMFYUI_TINY),
                         exported_at=lambda n: f"diffusion_model.{comfyui.comfyui_module(n)}")


def comfyui_loader():
    """Wan 2.1 T2V in ComfyUI's loader: its WAN21_T2V model of the same widths."""
    from comfyui_cases import ComfyUILoad

    from dit_lora.families.wan.comfyui import comfyui_module

    return ComfyUILoad(
        transformer=("WanTransformer3DModel", dict(
            patch_size=(1, 2, 2), num_attention_heads=2, attention_head_dim=8, in_channels=4, out_channels=4,
            text_dim=16, freq_dim=16, ffn_dim=32, num_layers=2, cross_attn_norm=True, qk_norm="rms_norm_across_heads",
            eps=1e-6, rope_max_seq_len=32)),
        model_class="WAN21_T2V",
        unet_config=dict(image_model="wan2.1", model_type="t2v", dim=16, num_heads=2, ffn_dim=32, freq_dim=16,
                         text_dim=16, in_dim=4, out_dim=4, num_layers=2),
        comfy_name=lambda n: f"diffusion_model.{comfyui_module(n)}",
    )

#: the sibling name's folders a name trains too (its info.also_trains_folders_of; tests/setup/test_family_inference.py):
#: Wan I2V trains TI2V-5B's WanPipeline folder (the family checks which kind a folder is itself)
ALSO_TRAINS_FOLDERS_OF = {"wan_i2v": {"WanPipeline"}}
