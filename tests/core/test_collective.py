"""core/collective.py: a failure on one rank is every rank's, so none waits for ever at a collective.

The two-rank tests start two real CPU processes (gloo) under ``accelerate launch --multi_gpu``; each is bounded by
a timeout, so a hang fails the test instead of stalling it.
"""

from __future__ import annotations

import errno
import os
import subprocess
import sys

import pytest

from helpers import ROOT, free_port
from dit_lora.core.errors import UserError
from dit_lora.core.fileio import DiskFullError
from dit_lora.core.collective import Failure, main_process_check


class _One:
    is_main_process, process_index, num_processes = True, 0, 1


def test_one_process_raises_the_check_s_own_error():
    err = OSError(errno.EIO, "Input/output error")
    with pytest.raises(OSError) as caught:
        main_process_check(_One(), lambda: (_ for _ in ()).throw(err))
    assert caught.value is err
    assert main_process_check(_One(), lambda: 7, share_result=True) == 7


def test_a_failure_is_rebuilt_as_the_same_paragraph_and_code():
    disk = Failure.of(DiskFullError("No space left on device while writing x"), 1)
    assert disk.disk_full and isinstance(disk.error(), DiskFullError) and str(disk.error()) == disk.text
    stopped = UserError("stopped")
    stopped.exit_code = 3
    assert Failure.of(stopped, 0).error().exit_code == 3
    other = Failure.of(OSError(errno.EIO, "Input/output error"), 0)
    assert not other.user and other.text == "OSError: [Errno 5] Input/output error"


CHECK = """
import errno, sys
from accelerate import Accelerator
from dit_lora.core.errors import run_cli
from dit_lora.training.output_lock import main_process_check

def check():
    raise OSError(errno.EIO, "Input/output error", "/shared/out")

def main():
    accelerator = Accelerator(cpu=True)
    main_process_check(accelerator, check)
    print("went on", flush=True)

run_cli(main)
"""


@pytest.mark.slow
def test_an_unexpected_error_on_the_main_rank_stops_both_without_a_hang(tmp_path):
    script = tmp_path / "check.py"
    script.write_text(CHECK)
    cmd = [sys.executable, "-m", "accelerate.commands.launch", "--multi_gpu", "--num_processes", "2",
           "--num_machines", "1", "--mixed_precision", "no", "--dynamo_backend", "no",
           "--main_process_port", str(free_port()), str(script)]
    proc = subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT, timeout=180,
                          env={**os.environ, "CUDA_VISIBLE_DEVICES": "", "OMP_NUM_THREADS": "1"})
    text = proc.stdout + proc.stderr
    assert proc.returncode != 0 and "went on" not in text, text
    assert "OSError: [Errno 5] Input/output error: '/shared/out'" in text  # the main rank's own traceback
    # printed before rank 1 heard of it, and only then (the launcher's own ChildFailedError traceback follows)
    assert text.count('raise OSError(errno.EIO, "Input/output error", "/shared/out")') == 1, text
    flat = " ".join(text.split())
    assert ("error: The main process (rank 0) failed while running a start-up check (OSError: [Errno 5] Input/output error: "
            "'/shared/out'), so this process stops too.") in flat, text
