"""check_block: a patched block against the library's own, forward and backward, judged by the kernels' tolerance.

A toy two-stream block (LayerNorm, per-sample modulation, gated residual, a tuple output) stands in
for a library block; the family tests run the real ones (tests/families/<name>/test_kernels.py).
"""

from __future__ import annotations

import dataclasses

import pytest
import torch
from torch import nn

pytest.importorskip("triton")

from dit_lora.kernels.parity import check_block, patch_block  # noqa: E402
from dit_lora.kernels.patch_points import PatchPoint, source_fingerprint  # noqa: E402


class TwoStream(nn.Module):
    def __init__(self, dim: int = 9) -> None:
        super().__init__()
        self.norm = nn.LayerNorm(dim)
        self.mod = nn.Linear(5, 3 * dim)
        self.ff = nn.Linear(dim, dim)

    def forward(self, x, ctx, emb, scale_by=1.0):
        shift, scale, gate = self.mod(emb).chunk(3, dim=-1)
        h = self.norm(x) * (1 + scale[:, None]) + shift[:, None]
        return x + gate[:, None] * self.ff(h) * scale_by, ctx * 2


def fused(self, rt, x, ctx, emb, scale_by=1.0):
    shift, scale, gate = self.mod(emb).chunk(3, dim=-1)
    h = rt.call("modulate", x, self.norm.weight, self.norm.bias, scale, shift, self.norm.eps)
    return rt.call("gated_residual", x, gate, self.ff(h) * scale_by), ctx * 2


POINT = PatchPoint("toy.two_stream", TwoStream, ("modulate", "gated_residual"), source_fingerprint(TwoStream.forward),
                   forward=fused)


def _inputs():
    gen = torch.Generator().manual_seed(0)
    return {"x": torch.randn(3, 7, 9, generator=gen), "ctx": torch.randn(3, 4, 9, generator=gen),
            "emb": torch.randn(3, 5, generator=gen), "scale_by": 0.5}


def test_a_faithful_block_passes_forward_and_backward():
    torch.manual_seed(0)
    stats = []
    assert check_block(TwoStream(), [POINT], _inputs(), grads=("x", "ctx", "emb"), stats=stats) == ""
    compared = [s["what"] for s in stats]
    # output, then x, ctx, emb and the 6 parameters' gradients
    assert compared[0] == "output" and len(compared) == 1 + 3 + 6, compared


@pytest.mark.parametrize("fault", ["mixes samples", "drops the residual", "wrong parameter gradient"])
def test_a_faulty_block_fails(fault):
    def broken(self, rt, x, ctx, emb, scale_by=1.0):
        if fault == "mixes samples":
            emb = emb[:1].expand_as(emb)
        out, ctx2 = fused(self, rt, x, ctx, emb, scale_by)
        if fault == "drops the residual":
            out = out - x
        if fault == "wrong parameter gradient":
            out = out + (self.ff.bias - self.ff.bias.detach()) * 0.5  # forward unchanged, bias gradient off
        return out, ctx2

    torch.manual_seed(0)
    verdict = check_block(TwoStream(), [dataclasses.replace(POINT, forward=broken)], _inputs(), grads=("x",))
    assert "disagreed" in verdict, verdict
    assert ("gradient" in verdict) == (fault == "wrong parameter gradient"), verdict


def test_a_block_no_point_patches_is_refused():
    with pytest.raises(ValueError, match="no patch point patches TwoStream"):
        check_block(TwoStream(), [dataclasses.replace(POINT, when=lambda m: False)], _inputs(), grads=())


def test_patch_block_leaves_the_original_alone():
    block = TwoStream()
    copy, counts = patch_block(block, [POINT])
    assert counts["modulate"] == counts["gated_residual"] == 1
    assert "forward" in copy.__dict__ and "forward" not in block.__dict__
