"""On a CPU: which loaded weights are resident in which phase (memory-mapped vs converted at load).

diffusers and transformers load safetensors files through a memory mapping. A component loaded in the
dtype its file stores is handed out as tensors backed by that mapping: its pages become resident only
when something reads them (measured: loading DiT's fp32 VAE and transformer, 451 MiB, raised the RSS by
13 MiB; benchmarks/RESULTS.md). A component converted at load (stored bf16, loaded fp32, or the reverse)
is copied into fresh memory, and for the duration of its load the source pages are resident beside the
copy. On CUDA every weight is copied to the device either way, so none of this applies there.

The stored dtype comes from the safetensors headers of a local folder (the 8-byte length and the JSON
header only, never a tensor) or, for a catalogued Hub id that is not downloaded, the catalogue's stored
dtype.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import torch

from dit_lora.modelfiles.pipeline_files import SAFETENSORS_DTYPES, header_bytes, is_local, weight_files

if TYPE_CHECKING:
    from dit_lora.config.schema import ModelOptions

#: safetensors dtype names -> bytes per element
_ITEMSIZE = {
    "F64": 8,
    "F32": 4,
    "F16": 2,
    "BF16": 2,
    "I64": 8,
    "I32": 4,
    "I16": 2,
    "I8": 1,
    "U8": 1,
    "BOOL": 1,
    "F8_E4M3": 1,
    "F8_E5M2": 1,
}
#: torch floating dtypes -> safetensors dtype names
_TORCH = {torch.float32: "F32", torch.float16: "F16", torch.bfloat16: "BF16", torch.float64: "F64"}


@dataclass
class Stored:
    """What a component's files hold: bytes by safetensors dtype."""

    bytes_by_dtype: dict[str, int]

    @property
    def dtype(self) -> str:
        """The dtype holding most of the bytes (a file may keep a few small tensors in another)."""
        return max(self.bytes_by_dtype, key=self.bytes_by_dtype.__getitem__)

    @property
    def nbytes(self) -> int:
        return sum(self.bytes_by_dtype.values())


def stored_local(folder: Path, variant: str | None = None) -> Stored | None:
    """The stored bytes of the component in ``folder`` (None when it holds no safetensors file)."""
    total: dict[str, int] = {}
    for file in weight_files(folder, variant):
        for dtype, n in header_bytes(file).items():
            total[dtype] = total.get(dtype, 0) + n
    return Stored(total) if total else None


def stored_as(module: torch.nn.Module, dtype_name: str) -> Stored:
    """``module``'s tensors as a file storing its floating tensors in ``dtype_name`` would hold them."""
    itemsize = _ITEMSIZE[dtype_name]
    total: dict[str, int] = {}
    tensors = {id(t): t for t in [*module.parameters(), *module.buffers()]}.values()
    for t in tensors:
        name = dtype_name if t.is_floating_point() else str(t.dtype)
        size = itemsize if t.is_floating_point() else t.element_size()
        total[name] = total.get(name, 0) + t.numel() * size
    return Stored(total)


def loaded_dtype(module: torch.nn.Module) -> str | None:
    """The safetensors name of the floating dtype holding most of ``module``'s bytes as loaded."""
    by_dtype: dict[str, int] = {}
    for t in {id(t): t for t in [*module.parameters(), *module.buffers()]}.values():
        if t.dtype in _TORCH:
            by_dtype[_TORCH[t.dtype]] = by_dtype.get(_TORCH[t.dtype], 0) + t.numel() * t.element_size()
    return max(by_dtype, key=by_dtype.__getitem__) if by_dtype else None


def stored_component(
    path: str,
    subfolder: str,
    module: torch.nn.Module,
    *,
    variant: str | None = None,
    catalogue_dtype: str | None = None,
) -> Stored | None:
    """What ``module``'s files store: the local folder's headers, else the catalogue's (or --variant's) dtype.

    None when neither is known (the plan then counts the component as fully resident, as on a GPU).
    """
    if is_local(path):
        return stored_local(Path(path) / subfolder, variant)
    name = SAFETENSORS_DTYPES.get((variant or "").lower()) or SAFETENSORS_DTYPES.get((catalogue_dtype or "").lower())
    return stored_as(module, name) if name else None


def touched_bytes(module: torch.nn.Module, read_ids: set[int]) -> int:
    """Bytes of ``module``'s parameters and buffers that an operator took as input (ids in ``read_ids``)."""
    seen, total = set(), 0
    for t in [*module.parameters(), *module.buffers()]:
        if id(t) in read_ids and id(t) not in seen:
            seen.add(id(t))
            total += t.numel() * t.element_size()
    return total


def stored_bytes(
    model: ModelOptions, modules: dict[str, torch.nn.Module], subfolder: str, catalogue_dtype: str | None
) -> tuple[dict[str, int], dict[str, int]]:
    """For the host memory on an accelerator (plan/host.py): per component, the bytes its files hold (the folder's
    headers; the catalogue's dtype for a Hub id not downloaded; else its size as loaded), and the components
    converted at load with their loaded bytes."""
    stored, converted = {}, {}
    for name, module in modules.items():
        found = stored_component(
            str(model.pretrained_model_name_or_path),
            subfolder if name == "model" else name,
            module,
            variant=model.variant,
            catalogue_dtype=catalogue_dtype if name == "model" else None,
        )
        loaded = sum(t.numel() * t.element_size() for t in {id(t): t for t in _tensors(module)}.values())
        if found is None:
            stored[name] = loaded
            continue
        stored[name] = min(found.nbytes, stored_as(module, found.dtype).nbytes)
        if found.dtype != loaded_dtype(module):
            converted[name] = loaded
    return stored, converted


def _tensors(module: torch.nn.Module) -> list[torch.Tensor]:
    """The tensors a load reads: frozen parameters and buffers (the planned model carries its trainables too)."""
    return [*(p for p in module.parameters() if not p.requires_grad), *module.buffers()]
