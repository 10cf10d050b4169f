"""FLUX.2's answers to the shared tests (what each case is: tests/support/family_cases.py)."""

from __future__ import annotations

import torch
from loss_probe import B, C, H, W, Probe

from dit_lora.contract.family import Components


def masked_loss_probe(name):
    """FLUX.2's loss on its patchified tokens, one per latent position."""
    from dit_lora.families.flux2.loss import Flux2Loss, unpack
    from dit_lora.families.flux2.state import Flux2Run

    comps = Components(model=None, state=Flux2Run(scheduler_config={}, guidance_embeds=False))
    batch = {"prompt_embeds": torch.zeros(B, 3, 8)}
    return Flux2Loss(None), comps, batch, Probe((B, H * W, C)), lambda g: unpack(g, H, W)


def generic_kernel_probe():
    """FLUX.2 [dev]'s tiny transformer (its q/k norms torch's ``nn.RMSNorm``), batch 2 with a timestep each."""
    from dit_lora.families.flux2.demo import build_tiny_flux2_components
    from dit_lora.families.flux2.loss import latent_ids, pack, text_ids

    model = build_tiny_flux2_components("dev")["transformer"].float()
    gen = torch.Generator().manual_seed(0)
    latents = torch.randn(2, model.config.in_channels, 4, 4, generator=gen)
    embeds = torch.randn(2, 5, model.config.joint_attention_dim, generator=gen)
    inputs = {
        "hidden_states": pack(latents),
        "encoder_hidden_states": embeds,
        "timestep": torch.tensor([0.3, 0.8]),
        "guidance": torch.tensor([1.0, 1.0]),
        "txt_ids": text_ids(5, "cpu"),
        "img_ids": latent_ids(4, 4, "cpu"),
    }
    return model, inputs, lambda m, kw: m(**kw, return_dict=False)[0]

#: the Hub id its guide's main example names -> the options that make --demo build a tiny model of it
#: (tests/test_guides.py)
GUIDE_STAND_INS = {"black-forest-labs/FLUX.2-klein-base-4B": {"flux2_demo_variant": "klein"}}

#: which of the shared option groups tests/config/test_owners.py checks it owns (config/owners.py)
SHARED_OPTIONS = {"logit_mean", "weighting_scheme"}


def comfyui_export():
    """FLUX.2: generic names of comfy/ldm/flux/model.py and ``transformer.<key>`` of comfy/utils.py
    ``flux_to_diffusers`` (q/k/v as qkv slices, norm_out with swap_scale_shift); LoRA: the double blocks' q/k/v
    fused into two qkv."""
    import re

    from comfyui_cases import ComfyUIExport

    from dit_lora.families.flux2.comfyui import EXPORT

    keys = re.compile(
        r"^(transformer\.(transformer_blocks\.\d+\.attn\.(to_[qkv]|add_[qkv]_proj)|norm_out\.linear)"
        r"|diffusion_model\.(double_blocks\.\d+\.((img|txt)_attn\.(qkv|proj)|(img|txt)_mlp\.[02])"
        r"|single_blocks\.\d+\.linear[12]|img_in|txt_in|(time|guidance)_in\.(in|out)_layer"
        r"|double_stream_modulation_(img|txt)\.lin|single_stream_modulation\.lin|final_layer\.linear"
        r"|final_layer\.adaLN_modulation\.1))$"
    )

    def check_modules(kind, modules):
        if kind != "lora":
            assert "transformer.transformer_blocks.0.attn.add_k_proj" in modules  # a slice of txt_attn.qkv
            assert "transformer.norm_out.linear" in modules  # ComfyUI swaps its halves

    tiny = dict(patch_size=1, in_channels=16, out_channels=16, num_layers=1, num_single_layers=1, attention_head_dim=16,
                num_attention_heads=2, joint_attention_dim=16, axes_dims_rope=(4, 4, 4, 4), guidance_embeds=True)
    return ComfyUIExport(keys=keys, convert=EXPORT.comfyui_state, transformer=("Flux2Transformer2DModel", tiny),
                         exported_at=EXPORT.typed_layer_name, fused=lambda kind: 2 * 2 if kind == "lora" else 0,
                         check_modules=check_modules)


def comfyui_loader():
    """FLUX.2 in ComfyUI's loader: its Flux2 model of the same widths (BFL's names, q/k/v fused)."""
    from comfyui_cases import ComfyUILoad

    from dit_lora.families.flux2.comfyui import EXPORT

    return ComfyUILoad(
        transformer=("Flux2Transformer2DModel", dict(
            patch_size=1, in_channels=16, out_channels=16, num_layers=1, num_single_layers=1, attention_head_dim=16,
            num_attention_heads=2, joint_attention_dim=16, axes_dims_rope=(4, 4, 4, 4), guidance_embeds=True)),
        model_class="Flux2",
        unet_config=dict(image_model="flux2", in_channels=16, out_channels=16, vec_in_dim=None, context_in_dim=16,
                         hidden_size=32, mlp_ratio=3.0, num_heads=2, depth=1, depth_single_blocks=1,
                         axes_dim=[4, 4, 4, 4], theta=2000, patch_size=1, qkv_bias=False, guidance_embed=True,
                         txt_ids_dims=[3], global_modulation=True, mlp_silu_act=True, ops_bias=False,
                         default_ref_method="index", ref_index_scale=10.0),
        comfy_name=EXPORT.typed_layer_name,
    )
