"""CogVideoX's patch points against the installed diffusers: the patched block vs diffusers' own, and the fingerprints.

The block is built at small odd sizes (3 heads of 8, 15 video and 7 text tokens, a 13-wide time
embedding), batch 3, fp32, with RoPE on the video tokens; the patched copy (its forward, its
adaLN-zero norms, its joint attention processor, its q/k LayerNorms) must match diffusers' block
forward and backward within the kernels' tolerance. A fingerprint test fails when diffusers'
source changed, so an upgrade forces a re-check of the re-implementations.
"""

from __future__ import annotations

import pytest
import torch

pytest.importorskip("triton")

from dit_lora.contract.capabilities import FusedKernels
from dit_lora.families.cogvideox import kernels as cogvideox_kernels  # noqa: E402
from dit_lora.kernels import kernel_counts, patch_model  # noqa: E402
from dit_lora.kernels.parity import check_block  # noqa: E402
from dit_lora.kernels.patch_points import drift_note  # noqa: E402

POINTS = cogvideox_kernels.patch_points()
HEADS, HEAD_DIM, VIDEO, TEXT, TIME, BATCH = 3, 8, 15, 7, 13, 3


def _block():
    from diffusers.models.transformers.cogvideox_transformer_3d import CogVideoXBlock

    torch.manual_seed(0)
    block = CogVideoXBlock(HEADS * HEAD_DIM, HEADS, HEAD_DIM, TIME, qk_norm=True, norm_elementwise_affine=True)
    with torch.no_grad():
        for name, p in block.named_parameters():
            if "norm" in name:
                p.add_(torch.randn_like(p) * 0.3)
    return block


def _inputs(rope=True):
    gen = torch.Generator().manual_seed(1)
    dim = HEADS * HEAD_DIM
    angles = (torch.rand(VIDEO, HEAD_DIM // 2, generator=gen) * 6.28).repeat_interleave(2, dim=-1)
    return {"hidden_states": torch.randn(BATCH, VIDEO, dim, generator=gen),
            "encoder_hidden_states": torch.randn(BATCH, TEXT, dim, generator=gen),
            "temb": torch.randn(BATCH, TIME, generator=gen),
            "image_rotary_emb": (angles.cos(), angles.sin()) if rope else None}


@pytest.mark.parametrize("rope", [True, False])
def test_patched_block_matches_diffusers_forward_and_backward(rope):
    verdict = check_block(_block(), POINTS, _inputs(rope), grads=("hidden_states", "encoder_hidden_states", "temb"))
    assert verdict == "", verdict


def test_every_point_is_used_by_the_block():
    block = _block()
    patch_model(block, POINTS, kernels="on", attention_backend="math")
    counts = kernel_counts(block)
    assert counts["modulate"] == 2  # norm1 and norm2 (cogvideox.norm_zero)
    assert counts["gated_residual"] == 1  # cogvideox.block
    assert counts["attention"] == 1  # cogvideox.attention


def test_a_block_forward_that_drops_a_residual_fails_the_check():
    import dataclasses

    def dropped(self, rt, hidden_states, encoder_hidden_states, temb, **kwargs):
        out, ctx = cogvideox_kernels.block_forward(self, rt, hidden_states, encoder_hidden_states, temb, **kwargs)
        return out, ctx - encoder_hidden_states  # the text stream loses its residual

    broken = (POINTS[0], dataclasses.replace(POINTS[1], forward=dropped), *POINTS[2:])
    verdict = check_block(_block(), broken, _inputs(), grads=("hidden_states",))
    assert "disagreed" in verdict


@pytest.mark.parametrize("point", POINTS, ids=lambda p: p.name)
def test_fingerprint_matches_the_installed_diffusers(point):
    # Fails after a diffusers upgrade that changed the re-implemented source: re-check the forward against the
    # new one (the test above), then record the new fingerprint and version in families/cogvideox/kernels.py.
    assert drift_note(point) == ""


def test_a_processor_whose_diffusers_source_changed_is_kept(monkeypatch):
    from diffusers.models.attention_processor import CogVideoXAttnProcessor2_0

    original = CogVideoXAttnProcessor2_0.__call__

    def changed_call(self, *args, **kwargs):
        return original(self, *args, **kwargs)

    monkeypatch.setattr(CogVideoXAttnProcessor2_0, "__call__", changed_call)
    block = _block()
    counts = patch_model(block, POINTS, kernels="on", attention_backend="math")
    assert counts["attention"] == 0 and type(block.attn1.processor) is CogVideoXAttnProcessor2_0
    assert counts["gated_residual"] == 1  # the block's own forward is unchanged: still fused


def test_the_family_declares_its_points():
    from dit_lora.registry import get_family

    fused = get_family("cogvideox").kernels  # CogVideoX's FamilySpec
    assert isinstance(fused, FusedKernels) and tuple(fused.kernel_patch_points()) == POINTS
