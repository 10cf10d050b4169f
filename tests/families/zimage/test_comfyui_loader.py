"""Z-Image's adapter in ComfyUI's own loader (tests/support/comfyui_loader.py runs ComfyUI's ``LoraLoader`` path on
its ZImage model, a Lumina2 NextDiT with fused q/k/v): the diffusers-named file dit-lora writes needs no export.
``comfy.utils.z_image_to_diffusers`` maps every tensor, to_q/to_k/to_v land in their slices of ``attention.qkv``,
and each weight's applied update is the file's B·A (dit-lora folds alpha/r into lora_B), which is the trained
model's (alpha/r)·B·A. Runs where ``DIT_LORA_COMFYUI`` names a ComfyUI checkout (never in CI)."""

from __future__ import annotations

import pytest
import torch

loader = pytest.importorskip("comfyui_loader")  # the harness (tests/support/comfyui_loader.py)
pytestmark = loader.comfyui

RANK, ALPHA = 4, 8
#: every Linear of the blocks (attention, feed-forward, modulation) and the patch and caption projections
TARGETS = (r".*(attention\.(to_q|to_k|to_v|to_out\.0)|feed_forward\.w[123]|(layers|noise_refiner)\.\d+\."
           r"adaLN_modulation\.0|all_x_embedder\.2-1|all_final_layer\.2-1\.linear|cap_embedder\.1)")
#: ComfyUI's ZImage (Lumina2 NextDiT) at the tiny widths; multiple_of=1: ComfyUI's FFN width int(dim * 8/3) is
#: diffusers' int(dim / 3 * 8) (the real model: 10240 both)
UNET = dict(image_model="lumina2", patch_size=2, in_channels=4, dim=32, cap_feat_dim=16, n_layers=2,
            n_refiner_layers=1, qk_norm=True, n_heads=2, n_kv_heads=2, axes_dims=[4, 6, 6], axes_lens=[64, 32, 32],
            rope_theta=256.0, ffn_dim_multiplier=8.0 / 3.0, z_image_modulation=True, time_scale=1000.0, multiple_of=1)


def test_comfyuis_own_loader_applies_every_tensor_at_the_trained_strength(tmp_path):
    from diffusers import ZImageTransformer2DModel

    torch.manual_seed(0)
    model = ZImageTransformer2DModel(in_channels=4, dim=32, n_layers=2, n_refiner_layers=1, n_heads=2, n_kv_heads=2,
                                     cap_feat_dim=16, axes_dims=[4, 6, 6], axes_lens=[64, 32, 32])
    result, expected = loader.random_adapter_in_comfyui(model, "zimage", TARGETS, tmp_path, rank=RANK, alpha=ALPHA,
                                                        unet_config=UNET, model_class="ZImage")
    target, offset, _ = result.targets["transformer.layers.1.attention.to_k"]
    assert target == "diffusion_model.layers.1.attention.qkv.weight" and list(offset) == [0, 32, 32]
    # 3 modulated blocks (2 layers, 1 noise refiner): fused qkv, out, w1-w3, adaLN; the context refiner without
    # adaLN; the patch embedder, the final projection and the caption projection
    assert len(expected) == 3 * 6 + 5 + 3
    # ... which is the trained model's own update: (alpha / r) B·A of the live, unfolded PEFT layers
    live = model.layers[1].attention.to_k
    trained = ALPHA / RANK * live.lora_B["default"].weight @ live.lora_A["default"].weight
    torch.testing.assert_close(result.deltas["diffusion_model.layers.1.attention.qkv.weight"][32:64], trained,
                               atol=1e-5, rtol=1e-5)
