"""Sana's patch points against the installed diffusers: the patched block vs diffusers' own, and the fingerprints.

The block is built at small odd sizes (3 heads of 8, a 3 x 5 latent grid, captions of 7 tokens
padded differently per sample), batch 3, fp32; the patched copy (its forward, its linear and
cross-attention processors, its q/k RMSNorms where it has them) must match diffusers' block forward
and backward, within the kernels' tolerance. A fingerprint test fails when diffusers' source
changed, so an upgrade forces a re-check of the re-implementations.
"""

from __future__ import annotations

import logging

import pytest
import torch

pytest.importorskip("triton")

from dit_lora.contract.capabilities import FusedKernels
from dit_lora.families.sana import kernels as sana_kernels  # noqa: E402
from dit_lora.kernels import kernel_counts, patch_model  # noqa: E402
from dit_lora.kernels.parity import check_block  # noqa: E402
from dit_lora.kernels.patch_points import drift_note  # noqa: E402

POINTS = sana_kernels.patch_points()
HEADS, HEAD_DIM, HEIGHT, WIDTH, TEXT, BATCH = 3, 8, 3, 5, 7, 3


def _block(qk_norm=None, affine=False):
    from diffusers.models.transformers.sana_transformer import SanaTransformerBlock

    torch.manual_seed(0)
    dim = HEADS * HEAD_DIM
    block = SanaTransformerBlock(dim, HEADS, HEAD_DIM, num_cross_attention_heads=HEADS,
                                 cross_attention_head_dim=HEAD_DIM, cross_attention_dim=dim, attention_bias=True,
                                 norm_elementwise_affine=affine, qk_norm=qk_norm, mlp_ratio=2.5)
    with torch.no_grad():  # diffusers starts the table at random/dim scale; make the modulation matter
        block.scale_shift_table.normal_(0, 0.5)
        for name, p in block.named_parameters():
            if name.endswith(".weight") and "norm" in name:
                p.add_(torch.randn_like(p) * 0.3)
    return block


def _inputs(dim=HEADS * HEAD_DIM):
    gen = torch.Generator().manual_seed(1)
    mask = torch.ones(BATCH, TEXT)
    mask[1, 4:] = 0
    mask[2, 2:] = 0
    return {"hidden_states": torch.randn(BATCH, HEIGHT * WIDTH, dim, generator=gen),
            "encoder_hidden_states": torch.randn(BATCH, TEXT, dim, generator=gen),
            "encoder_attention_mask": ((1 - mask) * -10000.0).unsqueeze(1),  # as SanaTransformer2DModel passes it
            "timestep": torch.randn(BATCH, 6 * dim, generator=gen) * 0.5,
            "height": HEIGHT, "width": WIDTH}


@pytest.mark.parametrize("qk_norm, affine", [(None, False), ("rms_norm_across_heads", True)])
def test_patched_block_matches_diffusers_forward_and_backward(qk_norm, affine):
    block = _block(qk_norm, affine)
    verdict = check_block(block, POINTS, _inputs(), grads=("hidden_states", "encoder_hidden_states", "timestep"))
    assert verdict == "", verdict


def test_every_point_is_used_by_the_block():
    block = _block("rms_norm_across_heads")
    patch_model(block, POINTS, kernels="on", attention_backend="math")
    counts = kernel_counts(block)
    assert counts["modulate"] == counts["gated_residual"] == 1  # sana.block
    assert counts["linear_attention"] == 1 and counts["attention"] == 1  # the two processors
    assert counts["rmsnorm"] == 4  # both attentions' q/k norms (the generic point)


def test_a_sample_mixing_block_forward_fails_the_check():
    import dataclasses

    def mixing(self, rt, hidden_states, timestep=None, **kwargs):
        return sana_kernels.block_forward(self, rt, hidden_states, timestep=timestep.roll(1, 0), **kwargs)

    broken = (dataclasses.replace(POINTS[0], forward=mixing), *POINTS[1:])
    verdict = check_block(_block(), broken, _inputs(), grads=("hidden_states",))
    assert "disagreed" in verdict


@pytest.mark.parametrize("point", POINTS, ids=lambda p: p.name)
def test_fingerprint_matches_the_installed_diffusers(point):
    # Fails after a diffusers upgrade that changed the re-implemented source: re-check the forward against the
    # new one (the test above), then record the new fingerprint and version in families/sana/kernels.py.
    assert drift_note(point) == ""


def test_a_block_whose_diffusers_forward_changed_stays_eager_and_says_so(monkeypatch, caplog):
    monkeypatch.setattr("dit_lora.kernels.triton_launch._NOTED", set())  # once per process: start afresh
    from diffusers.models.transformers.sana_transformer import SanaTransformerBlock

    original = SanaTransformerBlock.forward

    def changed_forward(self, *args, **kwargs):  # an upgraded diffusers: same class, different source
        return original(self, *args, **kwargs)

    monkeypatch.setattr(SanaTransformerBlock, "forward", changed_forward)
    block = _block()
    with caplog.at_level(logging.WARNING, logger="dit_lora.kernels"):
        counts = patch_model(block, POINTS, kernels="on", attention_backend="math")
    assert "forward" not in block.__dict__  # left on diffusers' own forward
    assert counts["modulate"] == counts["gated_residual"] == 0
    assert counts["linear_attention"] == 1  # the processors' sources did not change: still fused
    lines = [r.getMessage() for r in caplog.records if "SanaTransformerBlock.forward" in r.getMessage()]
    assert len(lines) == 1 and "diffusers 0." in lines[0] and "fused ops are off" in lines[0], lines


def test_the_family_declares_its_points():
    from dit_lora.registry import get_family

    fused = get_family("sana").kernels  # Sana's FamilySpec
    assert isinstance(fused, FusedKernels) and tuple(fused.kernel_patch_points()) == POINTS
