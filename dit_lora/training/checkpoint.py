"""Atomic, resumable checkpoints: accelerate state + trainable weights + RNG + data position.

A checkpoint is built in a hidden temporary folder, every file is fsynced, the completion marker
is written last, and only then is the folder renamed to ``checkpoint-<step>``. A kill at any
instant therefore leaves every earlier checkpoint whole, and pruning happens only after a new
checkpoint is complete. Only folders with the marker are ever resumed from.
"""

from __future__ import annotations

import base64
import json
import os
import random
import re
import shutil
from pathlib import Path
from typing import Any

import numpy as np
import torch

from ..errors import UserError
from ..fileio import write_text_atomic

COMPLETE_MARKER = "dit_lora_checkpoint_complete.json"
TRAINABLE_FILE = "trainable_weights.safetensors"
GUARD_SNAPSHOT_FILE = "guard_snapshot.safetensors"  # the last good state a rollback returns to
_NAME = re.compile(r"^checkpoint-(\d+)$")


def _fsync_tree(folder: Path) -> None:
    for path in sorted(folder.rglob("*")):
        if path.is_file():
            with open(path, "rb") as fh:
                os.fsync(fh.fileno())
    _fsync_dir(folder)


def _fsync_dir(folder: Path) -> None:
    fd = os.open(folder, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def complete_checkpoints(output_dir: Path) -> list[tuple[int, Path]]:
    """Complete checkpoints in ``output_dir`` sorted by step (incomplete ones are ignored)."""
    found = []
    if not Path(output_dir).is_dir():
        return found
    for path in Path(output_dir).iterdir():
        match = _NAME.match(path.name)
        if match and (path / COMPLETE_MARKER).is_file():
            found.append((int(match.group(1)), path))
    return sorted(found)


def resolve_resume(output_dir: Path, spec: str | None) -> Path | None:
    """Map ``--resume_from_checkpoint`` (``latest`` or a path) to a complete checkpoint folder."""
    if not spec:
        return None
    if spec == "latest":
        found = complete_checkpoints(output_dir)
        return found[-1][1] if found else None
    path = Path(spec)
    if not path.is_absolute() and not path.exists():
        path = Path(output_dir) / spec
    if not path.is_dir():
        raise UserError(
            f"--resume_from_checkpoint `{spec}` does not exist. Use `latest` or one of: "
            f"{', '.join(p.name for _, p in complete_checkpoints(output_dir)) or 'no checkpoints yet'}."
        )
    if not (path / COMPLETE_MARKER).is_file():
        raise UserError(
            f"--resume_from_checkpoint `{path}` is incomplete (no {COMPLETE_MARKER}; the run was killed while "
            "saving it). Resume from an earlier checkpoint or use `latest`, which skips incomplete ones."
        )
    return path


def rng_state(generator: torch.Generator) -> dict[str, Any]:
    """Every RNG a training step touches, as JSON-safe values (no pickle on load)."""

    def enc(t: torch.Tensor) -> str:
        return base64.b64encode(t.cpu().numpy().tobytes()).decode()

    np_state = np.random.get_state()
    state = {
        "python": [random.getstate()[0], list(random.getstate()[1]), random.getstate()[2]],
        "numpy": [np_state[0], np_state[1].tolist(), int(np_state[2]), int(np_state[3]), float(np_state[4])],
        "torch": enc(torch.get_rng_state()),
        "generator": enc(generator.get_state()),
        "generator_device": str(generator.device),
    }
    if torch.cuda.is_available():
        state["cuda"] = [enc(s) for s in torch.cuda.get_rng_state_all()]
    return state


def restore_rng(state: dict[str, Any], generator: torch.Generator) -> None:
    """Inverse of :func:`rng_state`."""

    def dec(s: str) -> torch.Tensor:
        return torch.frombuffer(bytearray(base64.b64decode(s)), dtype=torch.uint8).clone()

    py = state["python"]
    random.setstate((py[0], tuple(py[1]), py[2]))
    np_state = state["numpy"]
    np.random.set_state((np_state[0], np.array(np_state[1], dtype=np.uint32), *np_state[2:]))
    torch.set_rng_state(dec(state["torch"]))
    generator.set_state(dec(state["generator"]))
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state_all([dec(s) for s in state["cuda"]])


def save_checkpoint(accelerator, output_dir: Path, step: int, trainer_state: dict, generator: torch.Generator,
                    total_limit: int | None, log=print, crash_point=lambda name, step: None) -> Path:
    """Write ``checkpoint-<step>`` atomically on every rank's behalf; prune old ones afterwards.

    ``crash_point(name, step)`` is called at the save's last instants (:meth:`~.hooks.Hooks.crash_point`).
    """
    output_dir = Path(output_dir)
    final = output_dir / f"checkpoint-{step}"
    tmp = output_dir / f".tmp-checkpoint-{step}"
    if accelerator.is_main_process:
        if tmp.exists():
            shutil.rmtree(tmp)
        tmp.mkdir(parents=True)
    accelerator.wait_for_everyone()
    accelerator.save_state(str(tmp))
    rank = accelerator.process_index
    per_rank = {**trainer_state, "rng": rng_state(generator)}
    (tmp / f"trainer_state_rank{rank}.json").write_text(json.dumps(per_rank))
    accelerator.wait_for_everyone()
    crash_point("checkpoint_before_marker", step)
    if accelerator.is_main_process:
        _fsync_tree(tmp)
        write_text_atomic(tmp / COMPLETE_MARKER, json.dumps({"step": step, "num_processes": accelerator.num_processes}))
        if final.exists():  # re-saving the same step after a resume: swap, never leave a gap
            old = output_dir / f".old-checkpoint-{step}"
            os.replace(final, old)
            os.replace(tmp, final)
            shutil.rmtree(old)
        else:
            os.replace(tmp, final)
        _fsync_dir(output_dir)
        crash_point("checkpoint_after_rename", step)
        if total_limit:
            for _, path in complete_checkpoints(output_dir)[:-total_limit]:
                shutil.rmtree(path)
                log(f"pruned {path.name} (--checkpoints_total_limit {total_limit})")
        log(f"saved {final}")
    accelerator.wait_for_everyone()
    return final


def load_checkpoint(accelerator, path: Path, generator: torch.Generator) -> dict:
    """Restore accelerate state and this rank's RNG/data position; return the trainer state."""
    marker = json.loads((Path(path) / COMPLETE_MARKER).read_text())
    if marker.get("num_processes") != accelerator.num_processes:
        raise UserError(
            f"Checkpoint {path} was written by {marker.get('num_processes')} processes but this run has "
            f"{accelerator.num_processes}. Resume with the same `accelerate launch --num_processes`, since data "
            "order and RNG streams are per process."
        )
    accelerator.load_state(str(path))
    state = json.loads((Path(path) / f"trainer_state_rank{accelerator.process_index}.json").read_text())
    restore_rng(state.pop("rng"), generator)
    return state
