"""kit/patch_table.py: a family's patch points with its name and library version stated once."""

from __future__ import annotations

from torch import nn

from dit_lora.kit.patch_table import PatchTable


def test_each_point_carries_the_familys_prefix_the_version_and_its_kernels():
    table = PatchTable("toy", "toylib 1.0")
    block = table.forward("block", nn.Linear, "modulate gated_residual", "abc", lambda self, rt, x: x,
                          lambda m: m.bias is not None)
    attention = table.processor("attention", nn.Identity, "attention", "def", lambda rt, original: original)
    assert (block.name, block.kernels, block.written_for, block.method) == (
        "toy.block", ("modulate", "gated_residual"), "toylib 1.0", "forward")
    assert block.matches(nn.Linear(2, 2)) and not block.matches(nn.Linear(2, 2, bias=False))
    assert (attention.name, attention.kernels, attention.fingerprint, attention.method) == (
        "toy.attention", ("attention",), "def", "__call__")
