"""FLUX.2 and the fused kernels: no patch points of its own; its q/k norms are torch's ``nn.RMSNorm``, which the
generic point patches (the whole transformer patched is checked against diffusers' own in
tests/kernels/test_patch_image_families.py, from this family's ``generic_kernel_probe``)."""

from __future__ import annotations

import pytest
from torch import nn

pytest.importorskip("triton")

from family_cases import cases

from dit_lora.kernels import kernel_counts, patch_model


def test_flux2_qk_norms_are_torch_rmsnorm_patched_by_the_generic_point():
    model, _, _ = cases("flux2").generic_kernel_probe()
    patch_model(model, (), kernels="on")
    norms = [m for name, m in model.named_modules() if name.endswith(("norm_q", "norm_k"))]
    assert norms and all(type(m) is nn.RMSNorm and "forward" in m.__dict__ for m in norms)
    assert kernel_counts(model)["rmsnorm"] == len([m for m in model.modules() if type(m) is nn.RMSNorm])
