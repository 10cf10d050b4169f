"""Chroma's adapter in ComfyUI's own loader (tests/support/comfyui_loader.py runs ComfyUI's ``LoraLoader`` path on its
``Chroma`` model, Black Forest Labs' layout with fused ``qkv`` and ``linear1`` and no per-block modulation): the
diffusers-named file dit-lora writes needs no export. ComfyUI's ``Chroma`` is a ``Flux`` model, so
``comfy.utils.flux_to_diffusers`` maps every tensor under ``transformer.``: the double blocks' q/k/v and the single
blocks' q/k/v and ``proj_mlp`` land in their slices of the fused weights, and each weight's applied update is the
file's B·A (dit-lora folds alpha/r into lora_B), the trained model's (alpha/r)·B·A. Runs where ``DIT_LORA_COMFYUI``
names a ComfyUI checkout (never in CI)."""

from __future__ import annotations

import pytest
import torch

loader = pytest.importorskip("comfyui_loader")  # the harness (tests/support/comfyui_loader.py)
pytestmark = loader.comfyui

RANK, ALPHA, HEADS, HEAD_DIM = 4, 8, 2, 8
#: every Linear of both block kinds (attention, feed-forwards; the single blocks' proj_mlp and proj_out) and the image
#: and caption embedders (Chroma's blocks have no modulation Linear: distilled_guidance_layer computes it)
TARGETS = (r".*(attn\.(to_q|to_k|to_v|to_out\.0|add_q_proj|add_k_proj|add_v_proj|to_add_out)|ff\.net\.(0\.proj|2)|"
           r"ff_context\.net\.(0\.proj|2)|single_transformer_blocks\.\d+\.(proj_mlp|proj_out)|x_embedder|"
           r"context_embedder)")
#: ComfyUI's Chroma at the tiny widths: its in_channels are the packed ones (unlike its Flux's: detection sets 64 for
#: the real model, diffusers' in_channels); the approximator's input and hidden widths (in_dim, hidden_dim), its output
#: the model width (out_dim)
UNET = dict(image_model="chroma", in_channels=16, out_channels=16, context_in_dim=20, hidden_size=HEADS * HEAD_DIM,
            mlp_ratio=4.0, num_heads=HEADS, depth=2, depth_single_blocks=2, axes_dim=[2, 2, 4], theta=10000,
            patch_size=2, qkv_bias=True, in_dim=16, out_dim=HEADS * HEAD_DIM, hidden_dim=24, n_layers=2,
            txt_ids_dims=[], vec_in_dim=None)  # as model_detection sets them for Chroma (no pooled vector input)


def test_comfyuis_own_loader_applies_every_tensor_at_the_trained_strength(tmp_path):
    from diffusers import ChromaTransformer2DModel

    torch.manual_seed(0)
    model = ChromaTransformer2DModel(patch_size=1, in_channels=16, num_layers=2, num_single_layers=2,
                                     attention_head_dim=HEAD_DIM, num_attention_heads=HEADS, joint_attention_dim=20,
                                     axes_dims_rope=(2, 2, 4), approximator_num_channels=16,
                                     approximator_hidden_dim=24, approximator_layers=2)
    result, expected = loader.random_adapter_in_comfyui(model, "chroma", TARGETS, tmp_path, rank=RANK, alpha=ALPHA,
                                                        unet_config=UNET, model_class="Chroma")
    target, offset, _ = result.targets["transformer.single_transformer_blocks.1.proj_mlp"]
    hidden = HEADS * HEAD_DIM
    assert target == "diffusion_model.single_blocks.1.linear1.weight" and list(offset) == [0, 3 * hidden, 4 * hidden]
    # per double block: img/txt qkv, proj, mlp.0, mlp.2 (8); per single block: linear1, linear2 (2); img_in, txt_in
    assert len(expected) == 2 * 8 + 2 * 2 + 2
    # ... which is the trained model's own update: (alpha / r) B·A of the live, unfolded PEFT layers
    live = model.single_transformer_blocks[1].attn.to_k
    trained = ALPHA / RANK * live.lora_B["default"].weight @ live.lora_A["default"].weight
    fused = result.deltas["diffusion_model.single_blocks.1.linear1.weight"]
    torch.testing.assert_close(fused[hidden : 2 * hidden], trained, atol=1e-5, rtol=1e-5)
