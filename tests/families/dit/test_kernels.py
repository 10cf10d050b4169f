"""DiT's patch point against the installed diffusers: the patched block vs diffusers' own, and the fingerprint.

diffusers' ``BasicTransformerBlock`` in DiT's configuration (``ada_norm_zero`` with a class
embedding, self-attention only) is built at small odd sizes (3 heads of 8, 15 tokens, 11
classes), batch 3, fp32; the patched copy (its forward and, through the generic point, its
attention processor) must match diffusers' block forward and backward within the kernels'
tolerance. A fingerprint test fails when diffusers' source changed, so an upgrade forces a re-check.
"""

from __future__ import annotations

import pytest
import torch

pytest.importorskip("triton")

from dit_lora.families.dit import kernels as dit_kernels  # noqa: E402
from dit_lora.kernels import kernel_counts, patch_model  # noqa: E402
from dit_lora.kernels.parity import check_block  # noqa: E402
from dit_lora.kernels.patch_points import drift_note  # noqa: E402

POINTS = dit_kernels.patch_points()
HEADS, HEAD_DIM, TOKENS, CLASSES, BATCH = 3, 8, 15, 11, 3


def _block(norm_type="ada_norm_zero", affine=False):
    from diffusers.models.attention import BasicTransformerBlock

    torch.manual_seed(0)
    return BasicTransformerBlock(HEADS * HEAD_DIM, HEADS, HEAD_DIM, activation_fn="gelu-approximate",
                                 num_embeds_ada_norm=CLASSES, attention_bias=True, norm_type=norm_type,
                                 norm_elementwise_affine=affine, norm_eps=1e-5)


def _inputs():
    gen = torch.Generator().manual_seed(1)
    return {"hidden_states": torch.randn(BATCH, TOKENS, HEADS * HEAD_DIM, generator=gen),
            "timestep": torch.tensor([3, 480, 997]), "class_labels": torch.tensor([0, 7, CLASSES])}


@pytest.mark.parametrize("affine", [False, True])
def test_patched_block_matches_diffusers_forward_and_backward(affine):
    verdict = check_block(_block(affine=affine), POINTS, _inputs(), grads=("hidden_states",))
    assert verdict == "", verdict


def test_the_block_and_its_attention_are_patched_other_configurations_are_not():
    block = _block()
    patch_model(block, POINTS, kernels="on", attention_backend="math")
    assert kernel_counts(block)["modulate"] == kernel_counts(block)["gated_residual"] == 1
    assert kernel_counts(block)["attention"] == 1  # diffusers' AttnProcessor2_0: the generic point
    plain = _block(norm_type="layer_norm")
    patch_model(plain, POINTS, kernels="on")
    assert "forward" not in plain.__dict__ and kernel_counts(plain)["modulate"] == 0
    with pytest.raises(ValueError, match="no patch point"):
        check_block(plain, POINTS, {"hidden_states": torch.randn(2, 5, HEADS * HEAD_DIM)}, grads=())


def test_a_block_forward_with_a_wrong_gate_fails_the_check():
    import dataclasses

    def wrong(self, rt, hidden_states, **kwargs):
        out = dit_kernels.block_forward(self, rt, hidden_states, **kwargs)
        return out + 0.05 * out.flip(0)  # a sample leaks into another

    verdict = check_block(_block(), (dataclasses.replace(POINTS[0], forward=wrong),), _inputs(), grads=())
    assert "disagreed" in verdict


@pytest.mark.parametrize("point", POINTS, ids=lambda p: p.name)
def test_fingerprint_matches_the_installed_diffusers(point):
    # Fails after a diffusers upgrade that changed BasicTransformerBlock.forward: re-check the re-implementation
    # (the test above), then record the new fingerprint and version in families/dit/kernels.py.
    assert drift_note(point) == ""


def test_the_family_declares_its_points():
    from dit_lora.registry import get_family

    fused = get_family("dit").kernels  # DiT's FamilySpec
    assert fused is not None and tuple(fused.kernel_patch_points()) == POINTS
