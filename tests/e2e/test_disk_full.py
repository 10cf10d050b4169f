"""A full disk (ENOSPC) mid-run and during the final export: one paragraph, nothing lost, and the run continues
bit for bit once space is freed.

As root the disk is a small tmpfs the test mounts (real ENOSPC from the kernel, whatever library writes);
otherwise the writers a run uses (``torch.save``, safetensors' ``save_file``) get a byte budget and raise
``OSError(ENOSPC)`` past it. ``DIT_LORA_TEST_INJECT_ENOSPC=1`` forces the injection as root too.
"""

from __future__ import annotations

import errno
import gc
import json
import os
import shutil
import subprocess

import pytest
import torch
from safetensors.torch import load_file

from helpers import train_in_process
from dit_lora.core.fileio import DiskFullError
from dit_lora.training.checkpoint import COMPLETE_MARKER
from dit_lora.training.manifest import verify

OPTS = dict(max_train_steps=6, checkpointing_steps=2, checkpoints_total_limit=10)
ADAPTER = "pytorch_lora_weights.safetensors"
pytestmark = [pytest.mark.slow, pytest.mark.xdist_group("disk-full")]


def _tensor_bytes(obj) -> int:
    if torch.is_tensor(obj):
        return obj.numel() * obj.element_size()
    if isinstance(obj, dict):
        return sum(_tensor_bytes(v) for v in obj.values())
    if isinstance(obj, (list, tuple)):
        return sum(_tensor_bytes(v) for v in obj)
    return getattr(obj, "nbytes", 0)  # numpy arrays of the RNG state


class SmallDisk:
    """A folder on a disk that ``fill(leave)`` makes (nearly) full and ``free()`` empties again."""

    def __init__(self, path, monkeypatch):
        self.path, self.filler, self.budget = path, path / ".filler", None
        path.mkdir()
        self.mounted = (os.geteuid() == 0 and os.environ.get("DIT_LORA_TEST_INJECT_ENOSPC") != "1" and subprocess.run(
            ["mount", "-t", "tmpfs", "-o", "size=4m", "tmpfs", str(path)], capture_output=True).returncode == 0)
        if not self.mounted:
            self._inject(monkeypatch)

    def _inject(self, monkeypatch):
        import safetensors.torch

        def guarded(write, size_of):
            def wrapper(obj, target, *args, **kwargs):
                if self.budget is not None and str(target).startswith(str(self.path)):
                    size = size_of(obj)
                    if size > self.budget:
                        raise OSError(errno.ENOSPC, "No space left on device", str(target))
                    self.budget -= size
                return write(obj, target, *args, **kwargs)
            return wrapper

        monkeypatch.setattr(torch, "save", guarded(torch.save, _tensor_bytes))
        monkeypatch.setattr(safetensors.torch, "save_file", guarded(safetensors.torch.save_file, _tensor_bytes))
        monkeypatch.setattr("dit_lora.output.adapter.save_file", safetensors.torch.save_file)

    def room_for(self, checkpoint) -> int:
        """What ``checkpoint`` takes on this disk: tmpfs pages, or the tensor bytes the injected writers count."""
        files = [p for p in checkpoint.iterdir() if p.is_file()]
        if self.mounted:
            return sum(-(-p.stat().st_size // 4096) * 4096 for p in files) + 2 * 4096
        from accelerate.utils import load

        return sum(_tensor_bytes(load_file(str(p)) if p.suffix == ".safetensors" else load(str(p)))
                   for p in files if p.suffix in (".safetensors", ".bin", ".pkl"))

    def fill(self, leave: int) -> None:
        if not self.mounted:
            self.budget = leave
            return
        todo = shutil.disk_usage(self.path).free - leave
        with open(self.filler, "wb") as fh:
            while todo > 0:
                fh.write(b"\0" * min(todo, 1 << 16))
                todo -= 1 << 16

    def free(self) -> None:
        self.budget = None
        self.filler.unlink(missing_ok=True)

    def close(self) -> None:
        if self.mounted:
            gc.collect()  # tensors loaded from the disk map their files until collected
            if subprocess.run(["umount", str(self.path)], capture_output=True).returncode != 0:
                subprocess.run(["umount", "-l", str(self.path)], check=True)  # detached now, freed when unused


@pytest.fixture
def disk(tmp_path, monkeypatch):
    small = SmallDisk(tmp_path / "disk", monkeypatch)
    yield small
    small.close()


@pytest.fixture(scope="module")
def references(tmp_path_factory, tiny_sana, shapes_data):
    """Uninterrupted runs: with a checkpoint every 2 steps, and with none."""
    found = {}
    for name, cps in (("every2", 2), ("none", 0)):
        summary, out = train_in_process(tiny_sana, shapes_data, tmp_path_factory.mktemp(f"ref-{name}"),
                                        **dict(OPTS, checkpointing_steps=cps))
        assert isinstance(summary, dict), summary
        found[name] = out
    assert not list(found["none"].glob("checkpoint-*"))  # the export's safety net is removed with --checkpointing_steps 0
    return found


def _run(tiny_sana, shapes_data, disk, **opts):
    """A run whose output_dir is on the small disk (the cache is not)."""
    root = disk.path.parent
    err_or_summary, out = train_in_process(tiny_sana, shapes_data, root, **dict(OPTS, **opts),
                                           output_dir=disk.path / "out")
    return err_or_summary, disk.path / "out"


def _same_adapter(a, b):
    x, y = load_file(str(a / ADAPTER)), load_file(str(b / ADAPTER))
    return x.keys() == y.keys() and all(torch.equal(x[k], y[k]) for k in x)


def test_full_disk_during_a_checkpoint_save(disk, references, tiny_sana, shapes_data):
    def fill_after_step_3(step, model, optimizer):
        if step == 3:
            disk.fill(leave=20_000)

    err, out = _run(tiny_sana, shapes_data, disk, on_step=fill_after_step_3)
    assert isinstance(err, DiskFullError) and err.exit_code == 2, repr(err)
    text = str(err)
    assert text.startswith(f"No space left on device while writing checkpoint-4 to {out}. It needs about ")
    assert "are free on that file system" in text and ".tmp-checkpoint-4 was removed" in text
    assert f"The newest whole checkpoint is {out / 'checkpoint-2'}" in text
    assert text.endswith("--resume_from_checkpoint latest")
    assert sorted(p.name for p in out.iterdir() if "checkpoint" in p.name) == ["checkpoint-2"]
    assert verify(out / "checkpoint-2", COMPLETE_MARKER).whole and not (out / ADAPTER).exists()
    disk.free()
    summary, _ = _run(tiny_sana, shapes_data, disk, resume_from_checkpoint="latest")
    assert isinstance(summary, dict), summary
    assert _same_adapter(references["every2"], out)


def test_full_disk_at_the_export_keeps_the_training(disk, references, tiny_sana, shapes_data):
    room = disk.room_for(references["every2"] / "checkpoint-6")  # the final checkpoint fits, the adapter does not

    def fill_after_the_last_step(step, model, optimizer):
        if step == OPTS["max_train_steps"]:
            disk.fill(leave=room)

    err, out = _run(tiny_sana, shapes_data, disk, checkpointing_steps=0, on_step=fill_after_the_last_step)
    assert isinstance(err, DiskFullError), repr(err)
    text = str(err)
    assert text.startswith(f"No space left on device while writing the adapter to {out}. It needs about ")
    assert f"The trained state is kept in {out / 'checkpoint-6'} (step 6)" in text
    assert "--resume_from_checkpoint latest (it resumes at the last step and trains nothing more)" in text
    assert not (out / ADAPTER).exists() and verify(out / "checkpoint-6", COMPLETE_MARKER).whole
    assert not list(out.glob(".tmp-adapter-*"))
    disk.free()
    summary, _ = _run(tiny_sana, shapes_data, disk, checkpointing_steps=0, resume_from_checkpoint="latest")
    assert isinstance(summary, dict), summary
    assert summary["steps"] == 6 and summary["steps_this_run"] == 0
    assert _same_adapter(references["none"], out)
    assert not list(out.glob("checkpoint-*"))  # --checkpointing_steps 0: removed once the export was written
    reference = json.loads((references["none"] / "train_summary.json").read_text())
    assert summary["loss_history"] == reference["loss_history"]


# Runs the recipe with torch.save refusing ENOSPC on one rank (DIT_LORA_TEST_ENOSPC_RANK) for the files of one
# checkpoint (DIT_LORA_TEST_ENOSPC_STEP): what that rank writes there is accelerate's state (the main rank's optimizer
# and RNG files, rank 1's RNG file); with the step "adapter", the adapter's writer refuses instead.
ENOSPC_ON_ONE_RANK = """
import errno, os, runpy, sys
import safetensors.torch
import torch
import dit_lora.output.adapter as adapter

_rank, _step = os.environ["DIT_LORA_TEST_ENOSPC_RANK"], os.environ["DIT_LORA_TEST_ENOSPC_STEP"]
_where = ".tmp-adapter-" if _step == "adapter" else f".tmp-checkpoint-{_step}"

def refusing(write):
    def wrapper(obj, target, *args, **kwargs):
        if os.environ.get("RANK") == _rank and _where in str(target):
            raise OSError(errno.ENOSPC, "No space left on device", str(target))
        return write(obj, target, *args, **kwargs)
    return wrapper

torch.save, adapter.save_file = refusing(torch.save), refusing(adapter.save_file)
safetensors.torch.save_file = refusing(safetensors.torch.save_file)  # what diffusers writes the adapter with
sys.argv = sys.argv[1:]
runpy.run_path(sys.argv[0], run_name="__main__")
"""


def _two_ranks_with_enospc(tmp_path, tiny_sana, shapes_data, rank, step, **opts):
    """`dit-lora launch --multi_gpu --num_processes 2` (CPU, gloo) of the recipe, ENOSPC on ``rank`` at ``step``."""
    from helpers import ROOT, base_args
    from warm_launch import launch

    wrapper = tmp_path / "enospc.py"
    wrapper.write_text(ENOSPC_ON_ONE_RANK)
    out = tmp_path / "out"
    # A rank left at a barrier would wait for ever: the timeout turns that hang into a failure.
    proc = launch(["--multi_gpu", "--num_processes", "2", "--num_machines", "1", "--mixed_precision", "no",
                   "--dynamo_backend", "no"], wrapper,
                  [str(ROOT / "recipes" / "sana_lora.py"),
                   *base_args(tiny_sana, shapes_data, out, tmp_path / "cache", train_batch_size=2, **opts)],
                  env={"OMP_NUM_THREADS": "1", "CUDA_VISIBLE_DEVICES": "", "DIT_LORA_TEST_ENOSPC_RANK": str(rank),
                       "DIT_LORA_TEST_ENOSPC_STEP": str(step)}, timeout=400)
    return proc, out, proc.stdout + proc.stderr


def _checkpoints(out):
    return sorted(p.name for p in out.iterdir() if "checkpoint" in p.name)


@pytest.mark.parametrize("rank", [0, 1])
def test_full_disk_on_one_rank_mid_run_stops_every_rank_with_one_paragraph(tmp_path, tiny_sana, shapes_data, rank):
    proc, out, text = _two_ranks_with_enospc(tmp_path, tiny_sana, shapes_data, rank, 4, max_train_steps=6,
                                             checkpointing_steps=2)
    assert proc.returncode == 2 and "Traceback" not in text, text
    # Each process prints the paragraph it raised (wrapped at 100 columns, paths split at hyphens): the same one.
    flat = "".join(text.split())
    head = "".join(f"error: No space left on device while writing checkpoint-4 to {out}. It needs about".split())
    assert flat.count("error:") == flat.count(head) >= 1, text
    assert "".join("The partial .tmp-checkpoint-4 was removed. The newest whole checkpoint is".split()) in flat
    assert flat.count("--resume_from_checkpointlatest") == flat.count(head)
    assert _checkpoints(out) == ["checkpoint-2"] and verify(out / "checkpoint-2", COMPLETE_MARKER).whole
    assert not (out / ADAPTER).exists()


@pytest.mark.parametrize("rank", [0, 1])
def test_full_disk_on_one_rank_at_the_final_checkpoint_still_exports(tmp_path, tiny_sana, shapes_data, rank):
    proc, out, text = _two_ranks_with_enospc(tmp_path, tiny_sana, shapes_data, rank, 5, max_train_steps=5,
                                             checkpointing_steps=2)
    assert proc.returncode == 0, text
    assert "Traceback" not in text and text.count("warning: no space left on device for the final checkpoint-5") == 1
    assert _checkpoints(out) == ["checkpoint-2", "checkpoint-4"]
    assert all(verify(out / name, COMPLETE_MARKER).whole for name in _checkpoints(out))
    assert (out / ADAPTER).is_file() and "finished:" in text


def test_full_disk_at_the_adapter_stops_every_rank_with_the_same_paragraph(tmp_path, tiny_sana, shapes_data):
    proc, out, text = _two_ranks_with_enospc(tmp_path, tiny_sana, shapes_data, 0, "adapter", max_train_steps=4,
                                             checkpointing_steps=2)
    assert proc.returncode == 2 and "Traceback" not in text, text
    flat = "".join(text.split())
    head = "".join(f"error: No space left on device while writing the adapter to {out}.".split())
    kept = "".join(f"The trained state is kept in {out / 'checkpoint-4'} (step 4)".split())
    assert flat.count("error:") == flat.count(head) == flat.count(kept) == 2, text  # raised by both processes
    assert all(verify(out / name, COMPLETE_MARKER).whole for name in ("checkpoint-2", "checkpoint-4"))


@pytest.mark.parametrize("extra", [{}, {"train_backbone": "proj_out"}, {"rank": 32}],
                         ids=["lora", "backbone", "rank32"])
def test_the_space_estimate_is_at_least_a_real_checkpoint_and_within_2x(tmp_path, tiny_sana, shapes_data,
                                                                        monkeypatch, extra):
    """The full-disk paragraph's "needs about" is the state's estimate before the first checkpoint (it once left out
    the rollback snapshot, the trainer state and the RNG files: 131 KB for a 292 KB checkpoint)."""
    from dit_lora.core.fileio import folder_bytes
    from dit_lora.training import checkpoint as ck

    estimates, real = {}, ck.state_bytes

    def recorded(accelerator, trainer_state_bytes=0):
        step = len(estimates) + 1  # one save per step
        estimates[step] = real(accelerator, trainer_state_bytes)
        return estimates[step]

    monkeypatch.setattr(ck, "state_bytes", recorded)
    summary, out = train_in_process(tiny_sana, shapes_data, tmp_path, max_train_steps=2, checkpointing_steps=1,
                                    checkpoints_total_limit=10, **extra)
    assert isinstance(summary, dict), summary
    for step in (1, 2):  # step 2's snapshot holds the optimizer state too
        size = folder_bytes(out / f"checkpoint-{step}")
        assert size <= estimates[step] <= 2 * size, (step, size, estimates[step])
