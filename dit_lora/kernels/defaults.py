"""Which implementation each fused op uses: measured defaults, ``--kernels on`` and ``--kernels off``.

A fused kernel is on by default only where ``benchmarks/kernels/ops_gpu.py`` measured it at least 1.5x
faster than eager PyTorch for forward+backward on that kind of device; where it did not, the
default is the faster of eager and ``torch.compile`` of the reference. :data:`MEASURED_DEFAULTS`
holds those decisions with the measurement they rest on (``benchmarks/RESULTS.md``): on CUDA the
modulate, gated-residual, RMSNorm and linear-attention kernels measured 1.9x to 11.7x faster and
are on by default; on a CPU nothing is measured faster, so ``--kernels auto`` keeps diffusers' own
code there and only chooses the attention backend. ``--kernels on`` asks for the Triton kernels
wherever Triton can run.
"""

from __future__ import annotations

import torch

from dit_lora.kernels.triton_launch import triton_usable

KERNEL_MODES = ("auto", "on", "off")
SPEEDUP_TO_ENABLE = 1.5

# device type -> op -> (implementation, the measurement behind it). Implementations: "triton"
# (the fused kernel) or "compiled" (torch.compile of the PyTorch reference).
MEASURED_DEFAULTS: dict[str, dict[str, tuple[str, str]]] = {
    "cuda": {
        "modulate": (
            "triton",
            "benchmarks/kernels/ops_gpu.py on an NVIDIA H100 80GB HBM3 (torch 2.11, Triton 3.6; bf16 fwd+bwd at D 1152/3072 x N 16k/64k): Triton median 2.52x eager, slowest shape 1.21x (modulate and the affine variant)",
        ),
        "gated_residual": (
            "triton",
            "benchmarks/kernels/ops_gpu.py on an NVIDIA H100 80GB HBM3 (torch 2.11, Triton 3.6; bf16 fwd+bwd at D 1152/3072 x N 16k/64k): Triton median 1.96x eager, slowest shape 1.89x",
        ),
        "rmsnorm": (
            "triton",
            "benchmarks/kernels/ops_gpu.py on an NVIDIA H100 80GB HBM3 (torch 2.11, Triton 3.6; bf16 fwd+bwd at D 1152/3072 x N 16k/64k): Triton median 11.66x eager, slowest shape 10.42x",
        ),
        "linear_attention": (
            "triton",
            "benchmarks/kernels/ops_gpu.py on an NVIDIA H100 80GB HBM3 (torch 2.11, Triton 3.6; bf16 fwd+bwd at D 1152/3072 x N 16k/64k): Triton median 3.87x eager, slowest shape 2.61x",
        ),
        # "layernorm" (plain LayerNorm without modulation, e.g. CogVideoX's q/k norms): not measured, stays eager.
    },
}


def choose_impl(op: str, device: torch.device | str, mode: str) -> tuple[str, str]:
    """(implementation, note) for ``op`` on ``device`` under ``--kernels mode``.

    The implementation is ``triton``, ``compiled`` or ``eager`` (leave diffusers' module alone);
    the note says why, in a sentence, when the answer is not what the mode asked for.
    """
    if mode not in KERNEL_MODES:
        raise ValueError(f"--kernels {mode!r}; choose one of {', '.join(KERNEL_MODES)}")
    device = torch.device(device)
    if mode == "off":
        return "eager", ""
    usable, why = triton_usable(device)
    if mode == "on":
        if usable:
            return "triton", ""
        return "eager", f"{why}; the fused ops keep their PyTorch reference paths"
    impl, evidence = MEASURED_DEFAULTS.get(device.type, {}).get(op, ("eager", ""))
    if impl == "triton" and not usable:
        return "eager", f"{why}; the fused ops keep their PyTorch reference paths"
    if impl == "eager":
        return "eager", (
            f"--kernels auto: no fused op has measured {SPEEDUP_TO_ENABLE}x faster than eager on a "
            f"{device.type} (benchmarks/RESULTS.md), so they stay off; --kernels on forces them"
        )
    return impl, evidence
