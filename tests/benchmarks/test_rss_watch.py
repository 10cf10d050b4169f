"""The memory watcher of the plan benchmarks (``benchmarks/common/rss_watch.py``): marks record the watched process's
peak and current RSS, and ``follow=rank_zero`` watches a launcher's child whose environment says ``RANK=0``, not
the launcher (a multi-process run's figures are rank 0's)."""

from __future__ import annotations

import importlib.util
import sys
import textwrap

from helpers import ROOT


def _rss_watch():
    """``benchmarks/common/rss_watch.py``, loaded from its file (``benchmarks`` is no installed package)."""
    spec = importlib.util.spec_from_file_location("rss_watch", ROOT / "benchmarks" / "common" / "rss_watch.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # its dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


# A "launcher" that holds little and starts one "rank" holding 64 MiB more than it when it prints its mark.
LAUNCHER = textwrap.dedent("""
    import os, subprocess, sys
    child = '''
    import sys, time
    held = bytearray(64 * 2**20)
    for i in range(0, len(held), 4096):
        held[i] = 1
    print("mark: rank", flush=True)
    time.sleep(0.5)
    '''
    env = {**os.environ, "RANK": "0"}
    sys.exit(subprocess.run([sys.executable, "-c", child], env=env).returncode)
""")


def test_rank_zero_is_followed_and_the_launcher_is_not():
    watch = _rss_watch()
    cmd = [sys.executable, "-c", LAUNCHER]
    followed = watch.watch(cmd, ("mark:",), follow=watch.rank_zero, timeout=60)
    launcher = watch.watch(cmd, ("mark:",), timeout=60)
    assert followed.returncode == 0 == launcher.returncode
    (rank,), (own,) = followed.marks, launcher.marks
    assert rank["hwm"] - own["hwm"] > 48 * 2**20  # the rank's 64 MiB buffer, which the launcher never holds
