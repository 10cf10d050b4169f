"""Atomic, resumable checkpoints: accelerate state + trainable weights + RNG + data position.

A checkpoint is built in a hidden temporary folder, every file is fsynced, the completion marker
is written last, and only then is the folder renamed to ``checkpoint-<step>``. A kill at any
instant therefore leaves every earlier checkpoint whole, and pruning happens only after a new
checkpoint is complete. Only folders with the marker are ever resumed from.

The marker carries a manifest of every file's size and SHA-256 (:mod:`.manifest`): ``latest`` skips a damaged
checkpoint with one line and resumes from the newest whole one, and a damaged one named explicitly is refused.
A checkpoint of an older dit-lora (a marker without a manifest) resumes unverified, and any failure to load
it is one paragraph naming the file. A save that fails (a full disk, a non-finite weight) on any process fails on
every process, never leaving the others at a barrier, and removes its staging folder; a full disk is one paragraph
with the space needed and free and the command that continues the run.
"""

from __future__ import annotations

import base64
import json
import os
import random
import re
import shutil
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any, cast

import numpy as np
import torch

from dit_lora.core.collective import Failure, exchange, share
from dit_lora.core.errors import UserError
from dit_lora.core.fileio import (
    DiskFullError,
    disk_full_message,
    folder_bytes,
    is_disk_full,
    settle_files,
    write_text_atomic,
)
from dit_lora.output.names import COMPLETE_MARKER  # re-exported: the checkpoints' own marker
from dit_lora.training.manifest import MANIFEST_KEY, UNSAFE_PICKLE, build_manifest, find_unreadable, verify
from dit_lora.training.resume_options import write_options
from dit_lora.training.signals import rerun_command

TRAINABLE_FILE = "trainable_weights.safetensors"
GUARD_SNAPSHOT_FILE = "guard_snapshot.safetensors"  # the last good state a rollback returns to
SHARDED_DIR = "sharded_state"  # FSDP2: every rank's shards of the trainable state (sharded_checkpoint.py)
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
    found: list[tuple[int, Path]] = []
    if not Path(output_dir).is_dir():
        return found
    for path in Path(output_dir).iterdir():
        match = _NAME.match(path.name)
        if match and (path / COMPLETE_MARKER).is_file():
            found.append((int(match.group(1)), path))
    return sorted(found)


def _main_print(msg: str) -> None:
    # Before the accelerator exists every rank runs this: only the launch's first rank speaks.
    if os.environ.get("RANK", "0") == "0":
        print(msg, flush=True)


def resolve_resume(output_dir: Path, spec: str | None, log: Callable[[str], None] = _main_print) -> Path | None:
    """Map ``--resume_from_checkpoint`` (``latest`` or a path) to a complete, verified checkpoint folder.

    ``latest`` checks the checkpoints newest first against their manifests, skips a damaged one with one line
    naming it and what is wrong, and returns the newest whole one (None when there is no checkpoint at all).
    A damaged checkpoint named explicitly, or only damaged ones under ``latest``, is a :class:`UserError`.
    """
    if not spec:
        return None
    if spec == "latest":
        found, damaged = complete_checkpoints(output_dir), []
        for _, path in reversed(found):
            verdict = verify(path, COMPLETE_MARKER)
            if verdict.whole:
                _note_unverified(path, verdict.verified, log)
                return path
            log(f"skipping damaged {path.name}: {verdict.problem}")
            damaged.append(f"{path.name}: {verdict.problem}")
        if damaged:
            raise UserError(
                f"--resume_from_checkpoint latest: every checkpoint in {output_dir} is damaged ({'; '.join(damaged)}). "
                "There is nothing whole to resume from: restore the folders from a backup, or remove them and start "
                "over without --resume_from_checkpoint."
            )
        return None
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
    verdict = verify(path, COMPLETE_MARKER)
    if not verdict.whole:
        raise UserError(
            f"--resume_from_checkpoint `{path}` is damaged: {verdict.problem}. "
            + _whole_alternatives(path.parent, exclude=path)
        )
    _note_unverified(path, verdict.verified, log)
    return path


def _note_unverified(path: Path, verified: bool, log: Callable[[str], None]) -> None:
    if not verified:
        log(f"{path.name} has no manifest (written by an older dit-lora): resuming from it unverified")


def _whole_alternatives(output_dir: Path, exclude: Path) -> str:
    """Which whole checkpoints remain next to ``exclude`` and how to resume from one (verified newest first)."""
    whole = []
    for _, p in reversed(complete_checkpoints(output_dir)):
        verdict = verify(p, COMPLETE_MARKER) if p.resolve() != Path(exclude).resolve() else None
        if verdict is not None and verdict.whole:
            whole.append((p, verdict.verified))
    if not whole:
        return (
            f"No other whole checkpoint is in {output_dir}: restore it from a backup, or start over without "
            "--resume_from_checkpoint."
        )
    names = ", ".join(p.name + ("" if verified else " (unverified: no manifest)") for p, verified in whole)
    # `latest` skips only what a manifest shows damaged: after an unverified failure, name the folder.
    latest = (
        " (or `--resume_from_checkpoint latest`, which skips damaged checkpoints)"
        if verify(exclude, COMPLETE_MARKER).verified
        else ""
    )
    return (
        f"Whole checkpoints in {output_dir}: {names}. Resume from the newest with "
        f"`--resume_from_checkpoint {whole[0][0]}`{latest}; it repeats the steps after it."
    )


def newest_whole(output_dir: Path) -> Path | None:
    """The newest checkpoint in ``output_dir`` that passes :func:`~.manifest.verify`, or None."""
    for _, path in reversed(complete_checkpoints(output_dir)):
        if verify(path, COMPLETE_MARKER).whole:
            return path
    return None


# What a checkpoint holds besides tensor bytes, measured on the tiny Sana demo: per process its RNG states
# (accelerate's pickle, ~15 KB, and the JSON copy in its trainer state, ~29 KB; more with CUDA devices); once, the
# marker with the manifest and the pickled optimizer's parameter groups.
RANK_FILES_BYTES = 64 * 1024
SHARED_FILES_BYTES = 32 * 1024
# Per trainable tensor: its safetensors header entries (weights, snapshot) and the pickling of its optimizer states
# (measured: about 1.5 KB).
PER_TENSOR_BYTES = 2048


def state_bytes(accelerator, trainer_state_bytes: int = 0) -> int:
    """An upper estimate of a checkpoint of this run, in bytes (within 2x of the real size; tested).

    The trainable weights and the optimizer state are each written twice: the weights and ``optimizer.bin``, and
    the rollback snapshot (:data:`GUARD_SNAPSHOT_FILE`, weights and optimizer state). Before the optimizer's first
    step its state is empty: Adam's two fp32 moments per weight are counted then. Add ``trainer_state_bytes`` (the
    loss history grows with the run; each process writes its own) and allowances for the small files and the
    per-tensor overhead of the file formats.
    """
    weights = tensors = moments = 0
    for model in accelerator._models:
        for p in model.parameters():
            if p.requires_grad:
                weights += p.numel() * p.element_size()
                moments += 2 * 4 * p.numel()
                tensors += 1
    opt_state = sum(
        v.numel() * v.element_size()
        for opt in accelerator._optimizers
        for st in getattr(opt, "state", {}).values()
        for v in st.values()
        if torch.is_tensor(v)
    )
    processes = getattr(accelerator, "num_processes", 1)
    return (
        2 * (weights + (opt_state or moments))
        + PER_TENSOR_BYTES * tensors
        + processes * (RANK_FILES_BYTES + trainer_state_bytes)
        + SHARED_FILES_BYTES
    )


def rng_state(generator: torch.Generator) -> dict[str, Any]:
    """Every RNG a training step touches, as JSON-safe values (no pickle on load)."""

    def enc(t: torch.Tensor) -> str:
        return base64.b64encode(t.cpu().numpy().tobytes()).decode()

    # np.random's global generator is the legacy MT19937, whose state is this tuple (numpy's stub also allows a dict)
    np_state = cast(tuple[str, np.ndarray, int, int, float], np.random.get_state(legacy=True))
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


def save_checkpoint(
    accelerator,
    output_dir: Path,
    step: int,
    trainer_state: dict,
    generator: torch.Generator,
    total_limit: int | None,
    log=print,
    crash_point=lambda name, step: None,
    options: dict | None = None,
    write_state: Callable[[Path], None] | None = None,
    extra_files: Callable[[Path], None] | None = None,
) -> Path:
    """Write ``checkpoint-<step>`` atomically on every rank's behalf; prune old ones afterwards.

    The marker, written last, carries the manifest of every file. A save that fails on any rank fails on every rank
    (:class:`_Save`) and removes its staging folder (a later save of the step would replace it anyway; only a
    SIGKILL leaves one); a full disk is a :class:`~dit_lora.core.fileio.DiskFullError` saying how much space the
    checkpoint needs and how to continue. ``crash_point(name, step)`` is called at the save's last instants
    (:meth:`~.hooks.Hooks.crash_point`). ``options`` (:func:`~.resume_options.options_record`: the run's resolved
    options, data fingerprint and changed-options history) is written beside them, under the manifest.
    ``write_state(folder)``, called on every rank, writes the weights and optimizer state instead of accelerate's
    ``save_state`` (FSDP2: each rank its shards, :mod:`.sharded_checkpoint`); the manifest covers its files too.
    ``extra_files(folder)``, called on the main process, writes further state (the EMA: :mod:`.ema`).
    """
    save = _Save(accelerator, Path(output_dir), step, len(json.dumps(trainer_state, default=str)))
    main = accelerator.is_main_process
    save.part(lambda: _stage(save.tmp, options) if main else None)
    save.part(lambda: _write_rank_files(accelerator, save.tmp, trainer_state, generator, write_state))
    if extra_files is not None:
        save.part(lambda: extra_files(save.tmp) if main else None)
    crash_point("checkpoint_before_marker", step)
    save.part(lambda: _complete(accelerator, save, total_limit, log, crash_point) if main else None)
    return save.final


class _Save:
    """One checkpoint save, in parts separated by collectives.

    Each rank runs its share of a part and catches what it raises; the ranks then exchange failures where they
    would have met at a barrier (:func:`~.collective.exchange`), so a rank that fails alone (its disk full, a
    non-finite weight, a bug) never leaves the others waiting at a barrier it skipped. On a failure anywhere, the
    main process removes the staging folder and every rank raises the same paragraph (see :meth:`_fail`).
    """

    def __init__(self, accelerator, output_dir: Path, step: int, trainer_state_bytes: int = 0) -> None:
        self.accelerator, self.output_dir, self.step = accelerator, output_dir, step
        self.final = output_dir / f"checkpoint-{step}"
        self.tmp = output_dir / f".tmp-checkpoint-{step}"
        # The estimate: the larger of the newest checkpoint's size (unverified: hashing it at every save would cost a
        # read of it) and the state's (a checkpoint grows: the snapshot gains the optimizer state, the loss history
        # lengthens). Every rank knows it: any of them may be the one whose write finds the disk full.
        found = complete_checkpoints(output_dir)
        self.needed = max(folder_bytes(found[-1][1]) if found else 0, state_bytes(accelerator, trainer_state_bytes))

    def part(self, work: Callable[[], None]) -> None:
        """Run this rank's share of ``work``; return on every rank when no rank failed, else raise on every rank."""
        own, failure = None, None
        try:
            work()
        except Exception as err:
            own = err
            full = not isinstance(err, UserError) and is_disk_full(err, self.output_dir, self.needed)
            failure = Failure.of(err, self.accelerator.process_index, full)
        except BaseException:  # a stop that cannot wait (a second signal): no staging folder left behind
            if self.accelerator.is_main_process:
                shutil.rmtree(self.tmp, ignore_errors=True)
            raise
        failures = exchange(self.accelerator, failure)
        if failures:
            self._fail(failures, own)

    def _fail(self, failures: list[Failure], own: Exception | None) -> None:
        """Remove the staging folder, then raise on every rank: a full disk's paragraph (the disk is the likeliest
        cause on all ranks), a :class:`UserError`'s own paragraph, or, for another error, that error where it
        happened and a paragraph naming that rank on the others."""
        if self.accelerator.is_main_process:  # removed before the message measures the free space
            shutil.rmtree(self.tmp, ignore_errors=True)
        first = next((f for f in failures if f.disk_full), failures[0])
        text = share(self.accelerator, self._message(first) if self.accelerator.is_main_process else None)
        if first.disk_full:
            raise DiskFullError(text) from own
        if own is not None:
            raise own
        raise first.error() if first.user else UserError(text)

    def _message(self, failure: Failure) -> str:
        """The paragraph every rank raises for ``failure`` (built on the main process, after the clean-up)."""
        whole = newest_whole(self.output_dir)
        kept = (
            f"The newest whole checkpoint is {whole}; earlier checkpoints are untouched"
            if whole
            else "No whole checkpoint exists yet"
        )
        if failure.disk_full:
            advice = (
                f"The partial {self.tmp.name} was removed. {kept}. Free at least that much (checkpoint folders "
                f"older than the newest whole one can go), then continue with: {rerun_command()}"
            )
            return disk_full_message(f"checkpoint-{self.step}", self.output_dir, self.needed, advice)
        if failure.user:
            return failure.text
        return (
            f"Process {failure.rank} failed while writing checkpoint-{self.step} ({failure.text}), so every "
            f"process stops. Its own error, printed above with its traceback, says why. The partial "
            f"{self.tmp.name} was removed. {kept}."
        )


def _stage(tmp: Path, options: dict | None = None) -> None:
    """A fresh staging folder (a SIGKILLed earlier save of this step may have left one), holding ``options``."""
    if tmp.exists():
        shutil.rmtree(tmp)
    tmp.mkdir(parents=True)
    if options is not None:
        write_options(tmp, options)


def _write_rank_files(
    accelerator, tmp: Path, trainer_state: dict, generator: torch.Generator, write_state=None
) -> None:
    """This rank's files: accelerate's state (weights and optimizer from the main process), or ``write_state``'s,
    and its trainer state."""
    if write_state is not None:
        write_state(tmp)
    else:
        accelerator.save_state(str(tmp))
    per_rank = {**trainer_state, "rng": rng_state(generator)}
    (tmp / f"trainer_state_rank{accelerator.process_index}.json").write_text(json.dumps(per_rank))


def _complete(accelerator, save: _Save, total_limit: int | None, log, crash_point) -> None:
    """Main process: the marker with the manifest, the rename into place, the pruning of old checkpoints."""
    tmp, final, output_dir, step = save.tmp, save.final, save.output_dir, save.step
    settle_files(tmp)  # every rank's files: the umask's mode (safetensors writes 0600), safetensors metadata sorted
    _fsync_tree(tmp)
    manifest = build_manifest(tmp, exclude=(COMPLETE_MARKER,))
    write_text_atomic(
        tmp / COMPLETE_MARKER,
        json.dumps({"step": step, "num_processes": accelerator.num_processes, MANIFEST_KEY: manifest}),
    )
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
        for path in _to_prune(output_dir, final, total_limit):
            shutil.rmtree(path)
            log(f"pruned {path.name} (--checkpoints_total_limit {total_limit})")
    log(f"saved {final}")


def _to_prune(output_dir: Path, final: Path, total_limit: int) -> list[Path]:
    """The checkpoints past ``--checkpoints_total_limit``, oldest first: never ``final``, the one just written (a
    checkpoint with a higher step, of another run, must not make a run delete its own newest state)."""
    others = [path for _, path in complete_checkpoints(output_dir) if path.resolve() != final.resolve()]
    return others[: max(0, len(others) - (total_limit - 1))]


# What reading a damaged or foreign file raises inside accelerate's, safetensors' and torch's loaders.
_READ_ERRORS = (OSError, ValueError, EOFError, KeyError, RuntimeError)


def check_resumable(path: Path, num_processes: int, *, sharded: bool) -> None:
    """Refuse, in one paragraph, a checkpoint this launch cannot resume: written by another number of processes, or
    by the other engine (FSDP2's ``sharded_state/`` against DDP's or one process's files). Called at the start of a
    run, before any model loads, and again when the checkpoint is read."""
    marker = json.loads((Path(path) / COMPLETE_MARKER).read_text())
    if marker.get("num_processes") != num_processes:
        raise UserError(
            f"Checkpoint {path} was written by {marker.get('num_processes')} processes but this run has "
            f"{num_processes}. Resume with the same `dit-lora launch --num_processes`, since data "
            "order and RNG streams are per process."
        )
    holds_shards = (Path(path) / SHARDED_DIR).is_dir()
    if holds_shards and not sharded:
        raise UserError(
            f"Checkpoint {path} was written by an FSDP2 run (its {SHARDED_DIR}/ holds each process's shards), and this "
            "run is not sharded. Resume it with the launch that wrote it: `dit-lora launch --config_file "
            "accelerate_configs/fsdp2.yaml` with the same --num_processes."
        )
    if sharded and not holds_shards:
        raise UserError(
            f"Checkpoint {path} holds no {SHARDED_DIR}/: it was written by a run without FSDP2 (DDP or one process). "
            "Resume it with the launch that wrote it (its accelerate config), or start this FSDP2 run afresh."
        )


def load_checkpoint(
    accelerator,
    path: Path,
    generator: torch.Generator,
    read_state: Callable[[Path], None] | None = None,
    *,
    sharded: bool | None = None,
) -> dict:
    """Restore accelerate state (or ``read_state(path)``'s: the run's engine, :mod:`.engine`) and this rank's
    RNG/data position; return the trainer state. ``sharded``: whether the run's engine writes shards (FSDP2; by
    default, whether a ``read_state`` is given).

    A file that cannot be read (damaged, truncated, or a foreign pickle, which is refused unread) is a
    :class:`UserError` naming it and the whole checkpoints to resume from instead.
    """
    check_resumable(path, accelerator.num_processes, sharded=read_state is not None if sharded is None else sharded)
    try:
        with warnings.catch_warnings():  # torch's note on the pickle protocol of accelerate's own files
            warnings.filterwarnings("ignore", message="Detected pickle protocol")
            if read_state is not None:
                read_state(Path(path))
            else:
                accelerator.load_state(str(path))
        state = json.loads((Path(path) / f"trainer_state_rank{accelerator.process_index}.json").read_text())
        restore_rng(state.pop("rng"), generator)
    except UserError:
        raise
    except Exception as err:
        raise _load_error(Path(path), err) from err
    return state


def _load_error(path: Path, err: Exception) -> Exception:
    """A :class:`UserError` for a checkpoint that failed to load, naming the file when one does not parse; an
    error that is no file's fault (a bug) is returned unchanged."""
    import pickle

    from safetensors import SafetensorError

    bad = find_unreadable(path)
    if bad is not None:
        what = f"{bad[0]} {bad[1]}"
    elif isinstance(err, (SafetensorError, pickle.UnpicklingError)):
        what = UNSAFE_PICKLE if isinstance(err, pickle.UnpicklingError) else f"a file is damaged ({err})"
    elif isinstance(err, _READ_ERRORS) and not isinstance(err, RuntimeError):
        what = f"it could not be read ({type(err).__name__}: {str(err).splitlines()[0][:200] if str(err) else ''})"
    else:
        return err
    return UserError(
        f"Checkpoint {path} could not be loaded: {what}. " + _whole_alternatives(path.parent, exclude=path)
    )


def check_same_trainables(state: dict, params: dict, input_dir) -> None:
    """Refuse a checkpoint whose trainable tensors are not this run's (another --rank, --lora_layers, or defaults
    that changed between versions), in one paragraph instead of a shape error."""
    missing = [n for n in state if n not in params]
    resized = [n for n in state if n in params and tuple(state[n].shape) != tuple(params[n].shape)]
    if missing or resized:
        name = (missing or resized)[0]
        found = (
            f"has no {name}"
            if missing
            else (f"builds {name} as {tuple(params[name].shape)}, the checkpoint holds {tuple(state[name].shape)}")
        )
        raise UserError(
            f"{input_dir} was written by a run with other trainable weights: this run {found}. Resume with the options "
            "the checkpoint was trained with (its run printed them at start, and the defaults block lists what was "
            "chosen for you: --rank, --lora_layers, --train_backbone); set them explicitly if a newer dit-lora "
            "chooses other defaults."
        )
