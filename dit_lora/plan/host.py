"""On an accelerator: the host memory (RAM) a run needs, beside the device memory the rest of the plan predicts.

What a run on a GPU holds in host memory, by phase (``benchmarks/RESULTS.md``, "LTX-2 and HunyuanVideo 1.5 on an
H200", measured it):

* **Loading.** The loader reads every component before any goes to the device (``kit/loader.py``).
  safetensors files are memory-mapped: a component loaded in the dtype its files store is tensors over the file's
  pages, resident once read (every weight is read on its way to the device). These are the model files' pages: the
  system can drop them when memory is short and read them again, so they are counted apart. A component converted
  at load (stored fp32, loaded bf16) is a copy in the process's own memory, its source pages mapped beside it; so is
  ``--quantize_base fp8_scaled``'s model (its fp8 Linears, made on the host before the device). bitsandbytes'
  nf4/int8 loads quantize onto the device shard by shard: neither their copy nor their files stay on the host.
* **Training.** Pinned host memory: ``--blocks_to_swap``'s blocks, ``--activation_offloading``'s saved tensors, and
  an EMA kept there (``--ema_device cpu``).
* **The process itself**: Python, torch and the CUDA libraries (:data:`PROCESS_BYTES`).

On a CPU the host is the device: the plan's own phases already count it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from dit_lora.plan.estimate import Plan

GIB = 2**30
#: the process beside the weights on a CUDA run (Python, torch, the CUDA runtime and libraries, the data): 2 GiB, what
#: the H200 runs of 2026-11-28 held beyond their predicted mapped files and fp8 copies (57.9 and 58.1 GiB measured,
#: 56.1 GiB of files and copies)
PROCESS_BYTES = 2 * GIB
#: --quantize_base / --quantize_text_encoder schemes bitsandbytes applies while loading onto the device
LOADED_ON_DEVICE = ("nf4", "int8")


def mapped_bytes(plan: Plan) -> int:
    """The model files' pages resident while loading: every component but those bitsandbytes loads onto the device."""
    skipped = set()
    if plan.quantized in LOADED_ON_DEVICE:
        skipped.add(plan.trained_component)
    if plan.text_encoder_quantized:
        skipped.add("text_encoder")
    return sum(size for name, size in plan.host_stored.items() if name not in skipped)


def copied_bytes(plan: Plan) -> int:
    """The process's own copies while loading: converted components as loaded, and fp8_scaled's fp8 model."""
    converted = dict(plan.host_converted)
    if plan.quantized is not None:  # the model's copy is the quantization's, not a dtype conversion
        converted.pop(plan.trained_component, None)
    fp8 = plan.fp8_linear_bytes if plan.quantized == "fp8_scaled" else 0
    return sum(converted.values()) + fp8


def training_bytes(plan: Plan) -> int:
    """Pinned host memory while training: swapped blocks, offloaded activations, an EMA on the host."""
    return plan.swapped_bytes + plan.offloaded_host_bytes() + plan.ema_host_bytes


def peak_bytes(plan: Plan) -> int:
    """The host memory at the run's peak: the larger phase plus the process (0 on a CPU: the plan's own peak)."""
    if plan.device == "cpu":
        return 0
    return max(mapped_bytes(plan) + copied_bytes(plan), training_bytes(plan)) + PROCESS_BYTES


def summary(plan: Plan) -> str:
    """``58.1 GiB (36.0 GiB of it model files' pages ...)``: the peak and what the system can drop of it."""
    peak, mapped = peak_bytes(plan), mapped_bytes(plan)
    loading = mapped + copied_bytes(plan) >= training_bytes(plan)
    dropped = f", {mapped / GIB:.1f} GiB of it model files' pages the system can drop and read again" if loading else ""
    return f"{peak / GIB:.1f} GiB{dropped}"
