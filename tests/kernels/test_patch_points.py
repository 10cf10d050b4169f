"""Patch points: the source fingerprint, drift safety at patch time, and kernels/ naming no model.

A toy block defined here stands in for a library class, so the checks need no diffusers model:
its forward is replaced (monkeypatched) to play an upgraded library whose source changed.
"""

from __future__ import annotations

import ast
import logging
import re
from pathlib import Path

import pytest
import torch
from torch import nn

from dit_lora.kernels import patch_model
from dit_lora.kernels.patch_points import PatchPoint, describe, drift_note, source_fingerprint

KERNELS_DIR = Path(__file__).resolve().parents[2] / "dit_lora" / "kernels"


class ToyBlock(nn.Module):
    """LayerNorm then a per-sample modulation (what the modulate op fuses)."""

    def __init__(self, dim: int = 7) -> None:
        super().__init__()
        self.norm = nn.LayerNorm(dim)

    def forward(self, x, scale, shift):
        """The library's own forward."""
        return self.norm(x) * (1 + scale[:, None]) + shift[:, None]


def fused_forward(self, rt, x, scale, shift):
    return rt.call("modulate", x, self.norm.weight, self.norm.bias, scale, shift, self.norm.eps)


def _point(**changes) -> PatchPoint:
    fields = {"name": "toy.block", "target": ToyBlock, "kernels": ("modulate",),
              "fingerprint": source_fingerprint(ToyBlock.forward), "forward": fused_forward, "written_for": "toy 1.0"}
    return PatchPoint(**{**fields, **changes})


def _inputs():
    gen = torch.Generator().manual_seed(0)
    return torch.randn(3, 5, 7, generator=gen), torch.randn(3, 7, generator=gen), torch.randn(3, 7, generator=gen)


def test_fingerprint_ignores_comments_docstrings_and_layout_but_not_code():
    def a(self, x):
        """Doc."""
        return x + 1  # a comment

    def b(self, x):
        # reworded
        return (x
                + 1)

    def c(self, x):
        return x + 2

    assert source_fingerprint(a) == source_fingerprint(b) != source_fingerprint(c)
    assert re.fullmatch(r"[0-9a-f]{16}", source_fingerprint(a))
    assert source_fingerprint(len) == ""  # no Python source: never equal to a recorded fingerprint


def test_a_point_names_exactly_one_replacement_and_its_kernels():
    with pytest.raises(ValueError, match="exactly one"):
        _point(forward=None)
    with pytest.raises(ValueError, match="exactly one"):
        _point(processor=lambda rt, original: original)
    with pytest.raises(ValueError, match="kernels"):
        _point(kernels=())
    assert _point().method == "forward" and _point(forward=None, processor=object).method == "__call__"


def test_a_matching_point_patches_and_the_patched_block_agrees():
    block = ToyBlock()
    x, scale, shift = _inputs()
    expected = block(x, scale, shift)
    counts = patch_model(block, [_point()], kernels="on")
    assert counts["modulate"] == 1 and "forward" in block.__dict__
    torch.testing.assert_close(block(x, scale, shift), expected, rtol=1e-5, atol=1e-5)


def test_a_changed_library_forward_leaves_the_block_eager_with_one_line(monkeypatch, caplog):
    monkeypatch.setattr("dit_lora.kernels.triton_launch._NOTED", set())  # once per process: start afresh

    def upgraded(self, x, scale, shift):  # same behaviour, different source: the patch was not written for it
        return self.norm(x) * (scale[:, None] + 1) + shift[:, None]

    point = _point(name="toy.drifted")  # written for the original forward
    monkeypatch.setattr(ToyBlock, "forward", upgraded)
    assert "ToyBlock.forward" in drift_note(point)
    with caplog.at_level(logging.WARNING, logger="dit_lora.kernels"):
        blocks = [ToyBlock(), ToyBlock()]
        model = nn.Sequential(*blocks)
        counts = patch_model(model, [point], kernels="on")
        patch_model(model, [point], kernels="on")  # a second patch: no second line
    assert counts["modulate"] == 0 and all("forward" not in b.__dict__ for b in blocks)
    lines = [r.getMessage() for r in caplog.records if "toy.drifted" in r.getMessage()]
    assert len(lines) == 1, lines
    assert "ToyBlock.forward" in lines[0] and "written for toy 1.0" in lines[0] and "fused ops are off" in lines[0]
    from dit_lora.kernels import kernel_runtime

    assert any("toy.drifted" in n for n in kernel_runtime(model).notes)


def test_a_recorded_fingerprint_of_none_is_never_checked(monkeypatch):
    monkeypatch.setattr(ToyBlock, "forward", lambda self, x, scale, shift: x)
    assert drift_note(_point(fingerprint=None)) == ""
    assert patch_model(ToyBlock(), [_point(fingerprint=None)], kernels="on")["modulate"] == 1


def test_when_restricts_a_point_to_the_configuration_it_implements():
    block = ToyBlock()
    assert patch_model(block, [_point(when=lambda m: m.norm.normalized_shape == (9,))], kernels="on")["modulate"] == 0
    assert "forward" not in block.__dict__


def test_describe_lists_recorded_and_installed_fingerprints():
    (row,) = describe([_point()])
    assert row["name"] == "toy.block" and row["method"] == "forward" and row["fingerprint"] == row["installed"]


def test_generic_points_match_the_installed_libraries():
    from dit_lora.kernels.patch import generic_patch_points

    for point in generic_patch_points():
        assert drift_note(point) == "", point.name


_MODEL_NAMES = re.compile(r"CogVideoX|Sana|DiT(?![a-z])|BasicTransformerBlock|PixArt|Flux|Wan(?![a-z])|Qwen|Llava")


def _code_strings(tree: ast.AST) -> list[str]:
    """Identifiers and string constants of a module, its docstrings and comments left out."""
    docstrings = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)) and node.body:
            first = node.body[0]
            if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant):
                docstrings.add(id(first.value))
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in docstrings:
            found.append(node.value)
        elif isinstance(node, ast.Name):
            found.append(node.id)
        elif isinstance(node, ast.Attribute):
            found.append(node.attr)
        elif isinstance(node, (ast.FunctionDef, ast.ClassDef, ast.alias)):
            found.append(getattr(node, "name", "") or "")
    return found


def test_kernels_code_names_no_model():
    # Which model gets which fused forward or processor is the family's (families/<name>/kernels.py).
    offenders = {}
    for path in sorted(KERNELS_DIR.glob("*.py")):
        hits = sorted({s for s in _code_strings(ast.parse(path.read_text())) if _MODEL_NAMES.search(s)})
        if hits:
            offenders[path.name] = hits
    assert not offenders, offenders
