"""training/output_lock.py: one run per --output_dir, a lock the kernel releases when its holder dies.

The holder in these tests is a real separate process that takes the lock through the module (as a run's main process
does), so the refusals are the ones a second run on the same machine sees.
"""

from __future__ import annotations

import errno
import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from helpers import base_args, free_port, run_recipe
from dit_lora.core.errors import UserError
from dit_lora.training import output_lock
from dit_lora.training.output_lock import LOCK_FILE, acquire, release

HOLD = """
import sys, time
from dit_lora.training.output_lock import acquire
acquire(sys.argv[1])
print("held", flush=True)
time.sleep(600)
"""


@pytest.fixture
def holder(tmp_path):
    """Start a process that holds the lock on a folder; yields (folder, process)."""
    procs = []

    def start(folder: Path) -> subprocess.Popen:
        proc = subprocess.Popen([sys.executable, "-c", HOLD, str(folder)], stdout=subprocess.PIPE, text=True)
        procs.append(proc)
        assert proc.stdout.readline().strip() == "held"
        return proc

    yield start
    for proc in procs:
        if proc.poll() is None:
            proc.kill()
        proc.wait()


def test_a_live_holder_is_named_and_the_second_acquire_stops(tmp_path, holder):
    out = tmp_path / "out"
    proc = holder(out)
    with pytest.raises(UserError) as caught:
        acquire(out)
    text = str(caught.value)
    assert f"pid {proc.pid} on host {socket.gethostname()}, started " in text
    assert "--output_dir" in text and "--overwrite_output_dir does not override" in text and "\n" not in text
    info = json.loads((out / LOCK_FILE).read_text())
    assert info["pid"] == proc.pid and info["host"] == socket.gethostname()


def test_a_sigkilled_holder_leaves_no_stuck_lock(tmp_path, holder):
    out = tmp_path / "out"
    proc = holder(out)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    assert json.loads((out / LOCK_FILE).read_text())["pid"] == proc.pid  # the stale file is still there...
    try:
        assert acquire(out) is None  # ...and does not block
        assert json.loads((out / LOCK_FILE).read_text())["pid"] == os.getpid()
    finally:
        release(out)


def test_the_same_process_reenters_and_release_frees_it_for_others(tmp_path):
    """Two runs in one process (tests, notebooks): the first to end must not free the other's lock."""
    out = tmp_path / "out"
    assert acquire(out) is None and acquire(out) is None
    probe = [sys.executable, "-c", "import sys; from dit_lora.training.output_lock import acquire; acquire(sys.argv[1])",
             str(out)]
    refused = subprocess.run(probe, capture_output=True, text=True)
    assert refused.returncode != 0 and f"pid {os.getpid()}" in refused.stderr
    release(out)  # the second run ends: the first still runs, so the folder stays locked
    refused = subprocess.run(probe, capture_output=True, text=True)
    assert refused.returncode != 0 and f"pid {os.getpid()}" in refused.stderr
    release(out)  # the first ends too
    assert subprocess.run(probe, capture_output=True, text=True).returncode == 0
    release(out)  # one more release than acquisitions changes nothing
    assert subprocess.run(probe, capture_output=True, text=True).returncode == 0


def test_an_output_dir_that_is_a_file_is_one_paragraph(tmp_path):
    (tmp_path / "out").write_text("x")
    with pytest.raises(UserError, match="is a file, not a folder"):
        acquire(tmp_path / "out")


def test_a_file_system_without_locks_is_a_warning(tmp_path, monkeypatch):
    def no_locks(fd, op):
        raise OSError(errno.ENOLCK, os.strerror(errno.ENOLCK))

    monkeypatch.setattr(output_lock.fcntl, "flock", no_locks)
    note = acquire(tmp_path / "out")
    assert note.startswith("warning:") and "does not support locks" in note and "one run per --output_dir" in note


@pytest.mark.slow
@pytest.mark.parametrize("extra", [{}, {"overwrite_output_dir": "true", "checkpointing_steps": 1}])
def test_a_second_recipe_run_stops_at_once_naming_the_first(tmp_path, holder, tiny_sana, shapes_data, extra):
    out = tmp_path / "out"
    proc = holder(out)
    started = time.monotonic()
    second = run_recipe(base_args(tiny_sana, shapes_data, out, tmp_path / "cache", **extra), timeout=120, warm=True)
    text = " ".join((second.stdout + second.stderr).split())
    assert second.returncode == 2, text
    assert f"pid {proc.pid} on host {socket.gethostname()}" in text and "Traceback" not in text
    assert "training:" not in text and not (tmp_path / "cache").exists()  # stopped before loading anything
    assert sorted(p.name for p in out.iterdir()) == [LOCK_FILE]
    print(f"second run refused in {time.monotonic() - started:.1f} s")


@pytest.mark.slow
def test_two_ranks_stop_together_without_deadlock(tmp_path, holder, tiny_sana, shapes_data):
    out = tmp_path / "out"
    proc = holder(out)
    launcher = [sys.executable, "-m", "accelerate.commands.launch", "--multi_gpu", "--num_processes", "2",
                "--num_machines", "1", "--mixed_precision", "no", "--dynamo_backend", "no",
                "--main_process_port", str(free_port())]
    second = run_recipe(base_args(tiny_sana, shapes_data, out, tmp_path / "cache"), launcher=launcher,
                        env={"CUDA_VISIBLE_DEVICES": ""}, timeout=240, warm=True)
    text = second.stdout + second.stderr
    assert second.returncode != 0 and f"pid {proc.pid}" in text, text
    assert "training:" not in text


@pytest.mark.slow
def test_a_two_rank_run_takes_the_lock_once_and_frees_it(tmp_path, tiny_sana, shapes_data):
    """Only the main process locks (a second rank locking would refuse its own run); the lock goes with the run."""
    out = tmp_path / "out"
    launcher = [sys.executable, "-m", "accelerate.commands.launch", "--multi_gpu", "--num_processes", "2",
                "--num_machines", "1", "--mixed_precision", "no", "--dynamo_backend", "no",
                "--main_process_port", str(free_port())]
    proc = run_recipe(base_args(tiny_sana, shapes_data, out, tmp_path / "cache", max_train_steps=1),
                      launcher=launcher, env={"CUDA_VISIBLE_DEVICES": ""}, timeout=400, warm=True)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    info = json.loads((out / LOCK_FILE).read_text())
    assert info["host"] == socket.gethostname()
    try:
        assert acquire(out) is None  # released when the run ended
    finally:
        release(out)


TRY = """
import sys
from dit_lora.core.errors import UserError
from dit_lora.training.output_lock import acquire
try:
    acquire(sys.argv[1])
except UserError:
    print("refused", flush=True)
else:
    print("acquired", flush=True)
"""


@pytest.mark.slow
def test_an_in_process_run_frees_its_folder_when_it_ends(tiny_sana, shapes_data, tmp_path):
    """A notebook or test that trains in process keeps living after the run: the lock must not outlive the run."""
    from helpers import train_in_process

    summary, out = train_in_process(tiny_sana, shapes_data, tmp_path, max_train_steps=2)
    assert isinstance(summary, dict), summary
    other = subprocess.run([sys.executable, "-c", TRY, str(out)], capture_output=True, text=True, timeout=60)
    assert other.stdout.strip() == "acquired", other.stdout + other.stderr


@pytest.mark.slow
@pytest.mark.parametrize("resume", [None, "latest"])
def test_the_lock_is_taken_before_the_folder_is_judged(tmp_path, holder, tiny_sana, shapes_data, capsys, resume):
    """The live run's finished adapter and checkpoints are not judged (or read while it changes them) by a second
    run: that run stops on the lock first, without a word about the folder's content."""
    from helpers import train_in_process

    from dit_lora.training.checkpoint import COMPLETE_MARKER

    out = tmp_path / "out"
    proc = holder(out)
    (out / "pytorch_lora_weights.safetensors").write_bytes(b"finished")
    (out / "checkpoint-2").mkdir()  # being pruned by the holder: its manifest names a file already gone
    (out / "checkpoint-2" / COMPLETE_MARKER).write_text(json.dumps({"step": 2, "files": {"gone.bin": {
        "size": 1, "sha256": "0"}}}))
    err, _ = train_in_process(tiny_sana, shapes_data, tmp_path, resume_from_checkpoint=resume)
    assert isinstance(err, UserError) and f"pid {proc.pid} on host" in str(err), repr(err)
    assert "skipping damaged" not in capsys.readouterr().out


def test_a_run_that_fails_before_locking_leaves_another_runs_lock_alone(tmp_path, monkeypatch):
    """train()'s clean-up gives back only the acquisition its own setup made: a run refused before it locked (here a
    DeepSpeed launch, refused first) must not take a count off a lock another in-process run holds."""
    from dit_lora.config import parse_config
    from dit_lora.training.loop import train

    out = tmp_path / "out"
    assert acquire(out) is None
    try:
        monkeypatch.setenv("ACCELERATE_USE_DEEPSPEED", "true")
        cfg = parse_config(base_args(tmp_path / "model", tmp_path / "data", out, tmp_path / "cache"))
        with pytest.raises(UserError, match="DeepSpeed"):
            train(cfg)
        assert output_lock.holds(out) == 1
    finally:
        release(out)
    assert output_lock.holds(out) == 0


def test_a_symlinked_lock_file_is_refused_and_its_target_untouched(tmp_path):
    victim = tmp_path / "victim.txt"
    victim.write_text("precious data\n")
    out = tmp_path / "out"
    out.mkdir()
    (out / LOCK_FILE).symlink_to(victim)
    with pytest.raises(UserError) as caught:
        acquire(out)
    text = str(caught.value)
    assert victim.read_text() == "precious data\n" and output_lock.holds(out) == 0
    assert f"is a symbolic link to {victim}" in text and "Remove it" in text and "\n" not in text


def test_a_lock_path_that_is_not_a_regular_file_is_refused(tmp_path):
    out = tmp_path / "out"
    (out / LOCK_FILE).mkdir(parents=True)
    with pytest.raises(UserError, match="is not a regular file"):
        acquire(out)


def test_output_files_replace_a_planted_link_instead_of_writing_through_it(tmp_path):
    """The model card and the validation samples are written at known names: a link there is replaced."""
    from PIL import Image

    from dit_lora.kit.components import save_png
    from dit_lora.families.videollm.outputs import VideoLLMSamples
    from dit_lora.core.fileio import write_text_atomic

    victim = tmp_path / "victim.txt"
    victim.write_text("precious data\n")
    for name in ("README.md", "final_0.png", "final_1.txt"):
        (tmp_path / name).symlink_to(victim)
    write_text_atomic(tmp_path / "README.md", "card")  # what write_model_card uses
    save_png(Image.new("RGB", (4, 4)), tmp_path / "final_0")  # what every diffusion family's samples write with
    VideoLLMSamples().save_sample("an answer", tmp_path / "final_1", None)
    assert victim.read_text() == "precious data\n"
    assert not any((tmp_path / n).is_symlink() for n in ("README.md", "final_0.png", "final_1.txt"))
