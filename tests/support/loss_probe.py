"""The stand-in transformer of tests/modeling/test_masked_loss.py, which each family's ``masked_loss_probe`` (its
``tests/families/<package>/cases.py``) builds its loss's probe with.

A probe's output is a parameter shaped as the family's transformer output (packed tokens, a list, epsilon and
variance channels), so its gradient is the loss's gradient with respect to the prediction. Every probe runs on the
latent grid ``(B, C, H, W)``: even sides, so a family that packs 2 x 2 patches packs it whole.
"""

from __future__ import annotations

import torch

B, C, H, W = 2, 4, 4, 6  # latent grid: even sides (Qwen-Image packs 2 x 2 patches)


class Probe(torch.nn.Module):
    """A stand-in transformer whose output is a parameter (``shape``), laid out by ``wrap`` as the family's is."""

    def __init__(self, shape, wrap=lambda out: out):
        super().__init__()
        self.out, self.wrap = torch.nn.Parameter(torch.randn(shape, generator=torch.Generator().manual_seed(1))), wrap

    def forward(self, *args, **kwargs):
        return (self.wrap(self.out),)
