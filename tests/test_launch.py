"""``dit-lora launch`` (and plain ``accelerate launch``) on real launcher subprocesses: exit codes, signals,
no training process outliving its launcher."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from helpers import ROOT, base_args

from dit_lora.launch import _exit_code, run_process

DIT_LORA_LAUNCH = [sys.executable, "-m", "dit_lora.cli", "launch"]
ACCELERATE_LAUNCH = [sys.executable, "-m", "accelerate.commands.launch"]
LAUNCH_OPTS = ["--num_processes", "1", "--num_machines", "1", "--mixed_precision", "no", "--dynamo_backend", "no",
               "--num_cpu_threads_per_process", "1"]
RECIPE = str(ROOT / "recipes" / "sana_lora.py")


def test_exit_codes_as_a_shell_reports_them():
    assert [_exit_code(c) for c in (0, 2, 3, -15, -2, -9)] == [0, 2, 3, 143, 130, 137]


def test_run_process_returns_the_childs_code_and_forwards_sigterm(tmp_path):
    assert run_process([sys.executable, "-c", "raise SystemExit(3)"], dict(os.environ)) == 3
    # A child that saves on SIGTERM: the launcher (this process) gets SIGTERM, forwards it and waits.
    child = textwrap.dedent(f"""
        import signal, sys, time
        signal.signal(signal.SIGTERM, lambda *a: (time.sleep(0.5), open({str(tmp_path / 'saved')!r}, "w").close(),
                                                 sys.exit(143)))
        print("ready", flush=True)
        time.sleep(30)
    """)
    timer = subprocess.Popen([sys.executable, "-c", f"import os, time; time.sleep(2); os.kill({os.getpid()}, 15)"])
    try:
        started = time.time()
        code = run_process([sys.executable, "-c", child], dict(os.environ))
    finally:
        timer.wait()
    assert code == 143 and (tmp_path / "saved").exists() and time.time() - started < 20
    assert signal.getsignal(signal.SIGTERM) is signal.SIG_DFL or callable(signal.getsignal(signal.SIGTERM))


def test_run_process_names_a_kill_by_signal(capfd):
    assert run_process([sys.executable, "-c", "import os; os.kill(os.getpid(), 9)"], dict(os.environ)) == 137
    assert "killed by SIGKILL (exit 137)" in capfd.readouterr().err


def _user_error_args(tmp_path, tiny_sana, shapes_data):
    return base_args(tiny_sana, shapes_data, tmp_path / "out", tmp_path / "cache",
                     resume_from_checkpoint=str(tmp_path / "no-such-checkpoint"))


@pytest.mark.slow
def test_dit_lora_launch_exits_2_with_one_paragraph_on_a_user_error(tmp_path, tiny_sana, shapes_data):
    proc = subprocess.run([*DIT_LORA_LAUNCH, *LAUNCH_OPTS, RECIPE, *_user_error_args(tmp_path, tiny_sana, shapes_data)],
                          capture_output=True, text=True, cwd=ROOT, timeout=300)
    text = proc.stdout + proc.stderr
    assert proc.returncode == 2, text
    assert "does not exist" in text and "Traceback" not in text and "CalledProcessError" not in text
    assert text.count("error:") == 1 and "returned non-zero exit status" not in text


@pytest.mark.slow
def test_plain_accelerate_launch_loses_the_code_dit_lora_launch_keeps_it_under_torchrun(tmp_path, tiny_sana,
                                                                                       shapes_data):
    """What dit-lora launch is for: accelerate launch turns the user error into exit 1 and a traceback; under
    torchrun (--multi_gpu, 2 processes on CPU) dit-lora launch keeps exit 2, without a traceback."""
    from helpers import free_port

    args = _user_error_args(tmp_path, tiny_sana, shapes_data)
    plain = subprocess.run([*ACCELERATE_LAUNCH, *LAUNCH_OPTS, RECIPE, *args], capture_output=True, text=True,
                           cwd=ROOT, timeout=300)
    assert plain.returncode == 1 and "CalledProcessError" in plain.stderr  # accelerate's own behaviour
    multi = ["--multi_gpu", "--num_processes", "2", "--num_machines", "1", "--mixed_precision", "no",
             "--dynamo_backend", "no", "--main_process_port", str(free_port())]
    proc = subprocess.run([*DIT_LORA_LAUNCH, *multi, RECIPE, *args], capture_output=True, text=True, cwd=ROOT,
                          timeout=300, env={**os.environ, "OMP_NUM_THREADS": "1"})
    text = proc.stdout + proc.stderr
    assert proc.returncode == 2, text
    assert "does not exist" in text and "Traceback" not in text and "ChildFailedError" not in text


def _children(pid: int) -> list[int]:
    path = Path(f"/proc/{pid}/task/{pid}/children")
    return [int(p) for p in path.read_text().split()] if path.exists() else []


def _alive(pid: int) -> bool:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] != "Z"


def _start_training(launcher, tmp_path, tiny_sana, shapes_data):
    out = tmp_path / "out"
    args = base_args(tiny_sana, shapes_data, out, tmp_path / "cache", max_train_steps=100000, resolution=32,
                     train_batch_size=2)
    proc = subprocess.Popen([*launcher, *LAUNCH_OPTS, RECIPE, *args], cwd=ROOT, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True, env={**os.environ, "PYTHONUNBUFFERED": "1"})
    seen = ""
    while "steps:" not in seen:  # the training loop has started
        char = proc.stdout.read(1)
        assert char, seen
        seen += char
    (child,) = _children(proc.pid)
    return proc, child, out, seen


@pytest.mark.slow
@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")
def test_sigterm_to_dit_lora_launch_saves_and_ends_both_processes(tmp_path, tiny_sana, shapes_data):
    proc, child, out, seen = _start_training(DIT_LORA_LAUNCH, tmp_path, tiny_sana, shapes_data)
    proc.send_signal(signal.SIGTERM)
    rest, _ = proc.communicate(timeout=120)
    text = seen + rest
    assert proc.returncode == 143, text
    assert not _alive(child) and "Traceback" not in text
    (checkpoint,) = out.glob("checkpoint-*")
    assert (checkpoint / "dit_lora_checkpoint_complete.json").is_file()
    assert f"saved {checkpoint}" in text and "dit-lora launch --num_processes 1" in text  # the resume command


@pytest.mark.slow
@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")
def test_sigterm_to_plain_accelerate_launch_does_not_leave_the_training_running(tmp_path, tiny_sana, shapes_data):
    """accelerate launch dies at once on SIGTERM; its training process gets the launcher's death as a SIGTERM
    (PR_SET_PDEATHSIG), saves a checkpoint and ends instead of training on as an orphan."""
    proc, child, out, _ = _start_training(ACCELERATE_LAUNCH, tmp_path, tiny_sana, shapes_data)
    proc.send_signal(signal.SIGTERM)
    proc.wait(timeout=60)
    deadline = time.time() + 120
    while _alive(child) and time.time() < deadline:
        time.sleep(0.2)
    assert not _alive(child)
    (checkpoint,) = out.glob("checkpoint-*")
    assert (checkpoint / "dit_lora_checkpoint_complete.json").is_file()


@pytest.mark.slow
@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")
def test_sigterm_to_dit_lora_launch_multi_process_saves_one_checkpoint_and_ends_all(tmp_path, tiny_sana,
                                                                                   shapes_data):
    """Under torchrun (--multi_gpu, 2 processes on CPU): the agent passes the signal to both training processes,
    they agree on a step, save one checkpoint and exit; the launcher exits 143 after them."""
    from helpers import free_port

    multi = ["--multi_gpu", "--num_processes", "2", "--num_machines", "1", "--mixed_precision", "no",
             "--dynamo_backend", "no", "--main_process_port", str(free_port())]
    out = tmp_path / "out"
    args = base_args(tiny_sana, shapes_data, out, tmp_path / "cache", max_train_steps=100000, resolution=32,
                     train_batch_size=2)
    proc = subprocess.Popen([*DIT_LORA_LAUNCH, *multi, RECIPE, *args], cwd=ROOT, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True,
                            env={**os.environ, "PYTHONUNBUFFERED": "1", "OMP_NUM_THREADS": "1"})
    seen = ""
    while "steps:" not in seen:
        char = proc.stdout.read(1)
        assert char, seen
        seen += char
    workers = _children(proc.pid)
    assert len(workers) == 2
    proc.send_signal(signal.SIGTERM)
    rest, _ = proc.communicate(timeout=120)
    text = seen + rest
    assert proc.returncode == 143, text
    assert not any(_alive(pid) for pid in workers) and "Traceback" not in text
    (checkpoint,) = out.glob("checkpoint-*")
    assert {p.name for p in checkpoint.glob("trainer_state_rank*.json")} == {"trainer_state_rank0.json",
                                                                            "trainer_state_rank1.json"}
    assert (checkpoint / "dit_lora_checkpoint_complete.json").is_file() and f"saved {checkpoint}" in text
