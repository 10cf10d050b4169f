"""FLUX.1's adapter in ComfyUI's own loader (tests/support/comfyui_loader.py runs ComfyUI's ``LoraLoader`` path on its
``Flux`` model, Black Forest Labs' layout with fused ``qkv`` and ``linear1``): the diffusers-named file dit-lora
writes needs no export. ``comfy.utils.flux_to_diffusers`` maps every tensor under ``transformer.``: the double blocks'
q/k/v and the single blocks' q/k/v and ``proj_mlp`` land in their slices of the fused weights, and each weight's
applied update is the file's B·A (dit-lora folds alpha/r into lora_B), the trained model's (alpha/r)·B·A. Runs where
``DIT_LORA_COMFYUI`` names a ComfyUI checkout (never in CI)."""

from __future__ import annotations

import pytest
import torch

loader = pytest.importorskip("comfyui_loader")  # the harness (tests/support/comfyui_loader.py)
pytestmark = loader.comfyui

RANK, ALPHA, HEADS, HEAD_DIM = 4, 8, 2, 8
#: every Linear of both block kinds (attention, feed-forwards, modulations; the single blocks' proj_mlp and proj_out)
#: and the image and caption embedders
TARGETS = (r".*(attn\.(to_q|to_k|to_v|to_out\.0|add_q_proj|add_k_proj|add_v_proj|to_add_out)|ff\.net\.(0\.proj|2)|"
           r"ff_context\.net\.(0\.proj|2)|norm1\.linear|norm1_context\.linear|single_transformer_blocks\.\d+\."
           r"(proj_mlp|proj_out|norm\.linear)|x_embedder|context_embedder)")
#: ComfyUI's Flux at the tiny widths: its in_channels before the 2x2 patch (diffusers' 16 packed = 4 x 4)
#: (txt_ids_dims: [] for FLUX.1, as model_detection sets it)
UNET = dict(image_model="flux", in_channels=4, out_channels=4, vec_in_dim=12, context_in_dim=20,
            hidden_size=HEADS * HEAD_DIM, mlp_ratio=4.0, num_heads=HEADS, depth=2, depth_single_blocks=2,
            axes_dim=[2, 2, 4], theta=10000, patch_size=2, qkv_bias=True, guidance_embed=True, txt_ids_dims=[])


@pytest.mark.parametrize("family", ["flux", "flux_kontext"])
def test_comfyuis_own_loader_applies_every_tensor_at_the_trained_strength(tmp_path, family):
    """FLUX.1 Kontext's adapter (its spec's writer) too: ComfyUI loads Kontext as its ``Flux`` model (the image to edit
    comes in as ``reference_latents``), with the same LoRA key mapping."""
    from diffusers import FluxTransformer2DModel

    torch.manual_seed(0)
    model = FluxTransformer2DModel(patch_size=1, in_channels=16, num_layers=2, num_single_layers=2,
                                   attention_head_dim=HEAD_DIM, num_attention_heads=HEADS, joint_attention_dim=20,
                                   pooled_projection_dim=12, guidance_embeds=True, axes_dims_rope=(2, 2, 4))
    result, expected = loader.random_adapter_in_comfyui(model, family, TARGETS, tmp_path, rank=RANK, alpha=ALPHA,
                                                        unet_config=UNET, model_class="Flux")
    target, offset, _ = result.targets["transformer.single_transformer_blocks.1.proj_mlp"]
    hidden = HEADS * HEAD_DIM
    assert target == "diffusion_model.single_blocks.1.linear1.weight" and list(offset) == [0, 3 * hidden, 4 * hidden]
    # per double block: img/txt qkv, proj, mlp.0, mlp.2, mod.lin (10); per single block: linear1, linear2,
    # modulation.lin (3); img_in and txt_in
    assert len(expected) == 2 * 10 + 2 * 3 + 2
    # ... which is the trained model's own update: (alpha / r) B·A of the live, unfolded PEFT layers
    live = model.single_transformer_blocks[1].attn.to_k
    trained = ALPHA / RANK * live.lora_B["default"].weight @ live.lora_A["default"].weight
    fused = result.deltas["diffusion_model.single_blocks.1.linear1.weight"]
    torch.testing.assert_close(fused[hidden : 2 * hidden], trained, atol=1e-5, rtol=1e-5)
