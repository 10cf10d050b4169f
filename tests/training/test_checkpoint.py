"""resolve_resume's verification, save_checkpoint's manifest, clean-up and full-disk paragraph (fake accelerator)."""

from __future__ import annotations

import errno
import json
import os
import sys

import pytest
import torch

from dit_lora.core.errors import UserError
from dit_lora.core.fileio import DiskFullError
from dit_lora.training import checkpoint as ck
from dit_lora.training.manifest import MANIFEST_KEY


class FakeAccelerator:
    """What save_checkpoint uses of accelerate's Accelerator, one process; ``save_state`` writes two files."""

    is_main_process, process_index, num_processes = True, 0, 1

    def __init__(self, fail: BaseException | None = None):
        self.fail = fail
        self._models = [torch.nn.Linear(4, 4)]
        self._optimizers = []

    def wait_for_everyone(self):
        pass

    def save_state(self, folder):
        (torch.save({"w": torch.ones(4)}, os.path.join(folder, "optimizer.bin")))
        if self.fail is not None:
            raise self.fail
        with open(os.path.join(folder, "random_states_0.pkl"), "wb") as fh:
            fh.write(b"rng")


def _save(out, step, accelerator=None, limit=None):
    lines = []
    path = ck.save_checkpoint(accelerator or FakeAccelerator(), out, step, {"run": {"global_step": step}},
                              torch.Generator(), limit, log=lines.append)
    return path, lines


def test_marker_carries_a_manifest_of_every_file(tmp_path):
    path, lines = _save(tmp_path, 2)
    marker = json.loads((path / ck.COMPLETE_MARKER).read_text())
    assert set(marker[MANIFEST_KEY]) == {"optimizer.bin", "random_states_0.pkl", "trainer_state_rank0.json"}
    assert marker[MANIFEST_KEY]["random_states_0.pkl"]["size"] == 3 and lines == [f"saved {path}"]


def test_latest_skips_damaged_with_one_line_and_explicit_refuses(tmp_path):
    for step in (2, 4, 6):
        _save(tmp_path, step)
    os.truncate(tmp_path / "checkpoint-6" / "optimizer.bin", 10)
    lines = []
    assert ck.resolve_resume(tmp_path, "latest", log=lines.append) == tmp_path / "checkpoint-4"
    assert len(lines) == 1 and lines[0].startswith("skipping damaged checkpoint-6: optimizer.bin is truncated (10 of")
    with pytest.raises(UserError) as info:
        ck.resolve_resume(tmp_path, str(tmp_path / "checkpoint-6"))
    text = str(info.value)
    assert "checkpoint-6` is damaged: optimizer.bin is truncated" in text
    assert "Whole checkpoints in" in text and "checkpoint-4, checkpoint-2" in text
    assert f"--resume_from_checkpoint {tmp_path / 'checkpoint-4'}" in text


def test_latest_with_only_damaged_checkpoints_is_an_error(tmp_path):
    _save(tmp_path, 2)
    (tmp_path / "checkpoint-2" / "trainer_state_rank0.json").unlink()
    with pytest.raises(UserError, match="every checkpoint in .* is damaged .*trainer_state_rank0.json is missing"):
        ck.resolve_resume(tmp_path, "latest", log=lambda m: None)


def test_checkpoint_without_manifest_resumes_unverified(tmp_path):
    path, _ = _save(tmp_path, 2)
    (path / ck.COMPLETE_MARKER).write_text(json.dumps({"step": 2, "num_processes": 1}))  # as dit-lora wrote it before
    lines = []
    assert ck.resolve_resume(tmp_path, "latest", log=lines.append) == path
    assert lines == ["checkpoint-2 has no manifest (written by an older dit-lora): resuming from it unverified"]


def test_a_failed_save_leaves_no_staging_folder(tmp_path):
    _save(tmp_path, 2)
    with pytest.raises(RuntimeError, match="boom"):
        _save(tmp_path, 4, FakeAccelerator(fail=RuntimeError("boom")))
    assert sorted(p.name for p in tmp_path.iterdir()) == ["checkpoint-2"]


def test_a_full_disk_is_one_paragraph_with_sizes_and_the_command(tmp_path, monkeypatch):
    monkeypatch.setattr(sys, "argv", ["recipes/sana_lora.py", "--output_dir", str(tmp_path),
                                      "--resume_from_checkpoint", "checkpoint-2"])
    _save(tmp_path, 2)
    with pytest.raises(DiskFullError) as info:
        _save(tmp_path, 4, FakeAccelerator(fail=OSError(errno.ENOSPC, "No space left on device")))
    text = str(info.value)
    assert text.startswith(f"No space left on device while writing checkpoint-4 to {tmp_path}. It needs about ")
    assert "are free on that file system" in text and ".tmp-checkpoint-4 was removed" in text
    assert f"The newest whole checkpoint is {tmp_path / 'checkpoint-2'}" in text
    assert text.endswith(f"continue with: python recipes/sana_lora.py --output_dir {tmp_path} "
                         "--resume_from_checkpoint latest")
    assert info.value.exit_code == 2
    assert sorted(p.name for p in tmp_path.iterdir()) == ["checkpoint-2"]


def test_the_command_that_continues_is_the_launch_that_started_the_run(monkeypatch):
    """The disk-full paragraphs and the signal stop name one command: the run's own, started as it was."""
    from dit_lora.training import signals

    monkeypatch.setattr(sys, "argv", ["recipes/sana_lora.py", "--config", "a b.yaml", "--resume_from_checkpoint=x"])
    monkeypatch.setenv(signals.LAUNCHED_VAR + "_COMMAND", "dit-lora launch --num_processes 2")
    assert signals.rerun_command() == ("dit-lora launch --num_processes 2 recipes/sana_lora.py --config 'a b.yaml' "
                                       "--resume_from_checkpoint latest")


def test_pruning_never_removes_the_checkpoint_just_written(tmp_path):
    """Older checkpoints with higher steps (of another run) must not make a save prune itself."""
    for step in (35, 40):
        _save(tmp_path, step)
    path, lines = _save(tmp_path, 5, limit=2)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["checkpoint-40", "checkpoint-5"]
    assert lines == ["pruned checkpoint-35 (--checkpoints_total_limit 2)", f"saved {path}"]
    _save(tmp_path, 6, limit=1)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["checkpoint-6"]


def test_the_run_options_are_written_inside_the_checkpoint_under_its_manifest(tmp_path):
    record = {"options": {"learning_rate": 1e-4}, "data_fingerprint": "ab" * 32, "num_samples": 3,
              "changed_options": []}
    path = ck.save_checkpoint(FakeAccelerator(), tmp_path, 2, {"run": {"global_step": 2}}, torch.Generator(), None,
                              log=lambda line: None, options=record)
    assert json.loads((path / "run_options.json").read_text()) == record
    assert "run_options.json" in json.loads((path / ck.COMPLETE_MARKER).read_text())[MANIFEST_KEY]


def test_write_state_replaces_accelerates_files_and_is_in_the_manifest(tmp_path):
    """FSDP2's path: every rank's ``write_state`` writes the state (here one shard file) instead of save_state, and
    the marker's manifest lists it; such a checkpoint is refused by a run that is not sharded."""

    def write_state(folder):
        (folder / "sharded_state").mkdir()
        (folder / "sharded_state" / "__0_0.distcp").write_bytes(b"shard")

    final = ck.save_checkpoint(FakeAccelerator(), tmp_path, 2, {"run": {}}, torch.Generator(), None, log=lambda m: None,
                               write_state=write_state)
    marker = json.loads((final / ck.COMPLETE_MARKER).read_text())
    assert "sharded_state/__0_0.distcp" in marker[MANIFEST_KEY] and "optimizer.bin" not in marker[MANIFEST_KEY]
    with pytest.raises(UserError, match=r"written by an FSDP2 run .*accelerate_configs/fsdp2\.yaml"):
        ck.load_checkpoint(FakeAccelerator(), final, torch.Generator())
    read = []
    ck.load_checkpoint(FakeAccelerator(), final, torch.Generator(), read_state=read.append)
    assert read == [final]


def test_a_checkpoint_of_another_process_count_or_engine_is_refused_before_anything_loads(tmp_path):
    """check_resumable, which the run's start calls as soon as the checkpoint is chosen (a DDP checkpoint resumed
    under FSDP2 was refused only after loading, caching and sharding the model)."""
    import json

    from dit_lora.core.errors import UserError
    from dit_lora.training.checkpoint import COMPLETE_MARKER, SHARDED_DIR, check_resumable

    ddp = tmp_path / "checkpoint-4"
    ddp.mkdir()
    (ddp / COMPLETE_MARKER).write_text(json.dumps({"num_processes": 2, "files": {}}))
    check_resumable(ddp, 2, sharded=False)
    with pytest.raises(UserError, match="written by 2 processes but this run has 1"):
        check_resumable(ddp, 1, sharded=False)
    with pytest.raises(UserError, match=f"holds no {SHARDED_DIR}/: it was written by a run without FSDP2"):
        check_resumable(ddp, 2, sharded=True)
    (ddp / SHARDED_DIR).mkdir()
    check_resumable(ddp, 2, sharded=True)
    with pytest.raises(UserError, match="was written by an FSDP2 run"):
        check_resumable(ddp, 2, sharded=False)


def test_a_checkpoint_of_other_trainables_is_refused_in_one_paragraph():
    """Resuming with another --rank (or after a version that chooses another default rank) names the tensor and
    the fix instead of failing in copy_ with a shape error."""
    params = {"blocks.0.to_q.lora_A.default.weight": torch.nn.Parameter(torch.zeros(4, 32))}
    ck.check_same_trainables({"blocks.0.to_q.lora_A.default.weight": torch.zeros(4, 32)}, params, "ckpt-4")
    with pytest.raises(UserError, match=r"ckpt-4 .* builds blocks.0.to_q.lora_A.default.weight as \(4, 32\), the "
                                        r"checkpoint holds \(16, 32\).*--rank"):
        ck.check_same_trainables({"blocks.0.to_q.lora_A.default.weight": torch.zeros(16, 32)}, params, "ckpt-4")
    with pytest.raises(UserError, match="this run has no blocks.1.to_k.lora_A.default.weight"):
        ck.check_same_trainables({"blocks.1.to_k.lora_A.default.weight": torch.zeros(4, 32)}, params, "ckpt-4")
