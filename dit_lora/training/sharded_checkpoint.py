"""An FSDP2 run's state in its checkpoint: sharded files written by every rank through ``torch.distributed.checkpoint``.

Under DDP the main process writes the trainable weights and the guard's snapshot (safetensors) and accelerate
pickles the optimizer; under FSDP2 each rank holds only its shards, so every rank writes them into
``<checkpoint>/sharded_state/`` with DCP (one ``__<rank>_0.distcp`` file per rank and a ``.metadata`` file): the
trainable weights (``model/<name>``), the optimizer's state (``optim/<name>/<field>``: Adam's moments sharded as
the weights, its step count) and the guard's rollback snapshot (``snapshot/...``). The frozen base is not written.
The files are staged inside the checkpoint's hidden folder and covered by its manifest like every other file
(:mod:`.checkpoint`): the main process hashes them after every rank has written its own (a collective separates
the parts), so the folders must be on a file system every rank writes to (one machine, or a shared one).

Loading reads the metadata, builds a like-sharded template for every saved tensor from this run's parameters and
loads into it in place. DCP could reshard to another number of processes, but a resume keeps the number of
processes anyway (data order and RNG streams are per process, :func:`~.checkpoint.load_checkpoint`).
"""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace
from typing import Any

import torch
from torch import nn

from dit_lora.core.errors import UserError
from dit_lora.training.checkpoint import SHARDED_DIR, check_same_trainables
from dit_lora.training.guard import StepGuard

_MODEL, _OPTIM, _SNAPSHOT = "model/", "optim/", "snapshot/"


def _trainables(model: nn.Module) -> dict[str, torch.Tensor]:
    return {n: p for n, p in model.named_parameters() if p.requires_grad}


def _local(t: torch.Tensor) -> torch.Tensor:
    from torch.distributed.tensor import DTensor

    return t.to_local() if isinstance(t, DTensor) else t


def state_to_save(model: nn.Module, optimizer: torch.optim.Optimizer, guard: StepGuard) -> dict[str, torch.Tensor]:
    """The flat, named state DCP writes: trainable weights, optimizer state, the guard's snapshot (no frozen base)."""
    params = _trainables(model)
    state: dict[str, torch.Tensor] = {_MODEL + n: p.detach() for n, p in params.items()}
    for name, p in params.items():
        for field, value in optimizer.state.get(p, {}).items():
            if torch.is_tensor(value):
                state[f"{_OPTIM}{name}/{field}"] = value
    for key, value in guard.snapshot_tensors(model, to_cpu=False).items():
        state[_SNAPSHOT + key] = value
    bad = next((k for k, v in state.items() if v.is_floating_point() and not torch.isfinite(_local(v)).all()), None)
    if bad is not None:  # the guard makes this unreachable; never write a non-finite weight
        raise RuntimeError(f"refusing to write a checkpoint holding non-finite values in {bad}")
    return state


def save_sharded(folder: Path, model: nn.Module, optimizer: torch.optim.Optimizer, guard: StepGuard) -> None:
    """Every rank: write this rank's shards of the run's state into ``folder/sharded_state`` (a collective)."""
    import torch.distributed.checkpoint as dcp

    dcp.save(state_to_save(model, optimizer, guard), checkpoint_id=str(Path(folder) / SHARDED_DIR))


def _param_name(key: str) -> str:
    """The parameter a saved key belongs to: ``model/N``, ``optim/N/field``, ``snapshot/param/N``,
    ``snapshot/opt/N/field`` (``snapshot/applied`` and ``snapshot/spike`` belong to none: "")."""
    if key.startswith(_MODEL):
        return key[len(_MODEL) :]
    if key.startswith(_OPTIM):
        return key[len(_OPTIM) :].rpartition("/")[0]
    rest = key[len(_SNAPSHOT) :]
    if rest.startswith("param/"):
        return rest[len("param/") :]
    if rest.startswith("opt/"):
        return rest[len("opt/") :].rpartition("/")[0]
    return ""


def _template(key: str, size: torch.Size, dtype: torch.dtype, params: dict[str, torch.Tensor]) -> torch.Tensor:
    """A tensor to load ``key`` into: sharded like its parameter when it has the parameter's shape (weights,
    moments), else a whole tensor on the parameter's device (a step count) or on the CPU (the guard's counters)."""
    param = params.get(_param_name(key))
    if param is not None and tuple(param.shape) == tuple(size):
        return torch.zeros_like(param, dtype=dtype)
    device = param.device if param is not None else torch.device("cpu")
    return torch.zeros(size, dtype=dtype, device=device)


def _saved_tensors(path: Path) -> dict[str, Any]:
    """key -> tensor metadata (``size``, ``properties.dtype``) of the DCP folder ``path``."""
    import torch.distributed.checkpoint as dcp
    from torch.distributed.checkpoint.metadata import TensorStorageMetadata

    meta = dcp.FileSystemReader(str(path)).read_metadata().state_dict_metadata
    return {k: m for k, m in meta.items() if isinstance(m, TensorStorageMetadata)}


def load_sharded(folder: Path, model: nn.Module, optimizer: torch.optim.Optimizer, guard: StepGuard) -> None:
    """Every rank: restore the trainable weights, optimizer state and guard snapshot of ``folder`` in place."""
    import torch.distributed.checkpoint as dcp

    path = Path(folder) / SHARDED_DIR
    if not path.is_dir():
        raise UserError(
            f"Checkpoint {folder} holds no {SHARDED_DIR}/: it was written by a run without FSDP2 (DDP or one process). "
            "Resume it with the launch that wrote it (its accelerate config), or start this FSDP2 run afresh."
        )
    saved = _saved_tensors(path)
    params = _trainables(model)
    weights = {k[len(_MODEL) :]: m for k, m in saved.items() if k.startswith(_MODEL)}
    check_same_trainables({n: SimpleNamespace(shape=m.size) for n, m in weights.items()}, params, folder)
    template = {key: _template(key, m.size, m.properties.dtype, params) for key, m in saved.items()}
    dcp.load(template, checkpoint_id=str(path))
    with torch.no_grad():
        for name, value in template.items():
            if name.startswith(_MODEL):
                params[name[len(_MODEL) :]].copy_(value)
    for p in params.values():
        optimizer.state.pop(p, None)
    for key, value in template.items():
        if key.startswith(_OPTIM):
            name, _, field = key[len(_OPTIM) :].rpartition("/")
            optimizer.state.setdefault(params[name], {})[field] = value
    snapshot = {k[len(_SNAPSHOT) :]: v for k, v in template.items() if k.startswith(_SNAPSHOT)}
    if snapshot:
        guard.load_snapshot_tensors(model, snapshot)


__all__ = ["SHARDED_DIR", "load_sharded", "save_sharded", "state_to_save"]
