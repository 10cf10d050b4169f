"""The GPU benchmark scripts still run: ``--smoke`` trains a scaled-down model for two steps on the CPU."""

from __future__ import annotations

import subprocess
import sys

import pytest

from helpers import ROOT

pytestmark = pytest.mark.slow  # each runs a benchmark script end to end (the GPU ones train two steps)


@pytest.mark.parametrize("script", ["sana/step_gpu.py", "cogvideox/step_gpu.py", "videollm/step_gpu.py",
                                    "wan/step_gpu.py", "wan/kernels_gpu.py", "wan/family_step_gpu.py"])
def test_gpu_benchmark_smoke(script):
    proc = subprocess.run([sys.executable, str(ROOT / "benchmarks" / script), "--smoke"], capture_output=True,
                          text=True, timeout=300, cwd=ROOT)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    assert "smoke test passed" in proc.stdout


def test_kernels_benchmark_smoke():
    """benchmarks/kernels/ops_gpu.py --smoke: every fused op (Triton interpreter) and CPU attention backend, tiny
    shapes, checked against the references; torch.compile runs for one op."""
    proc = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "kernels" / "ops_gpu.py"), "--smoke"],
                          capture_output=True, text=True, timeout=300, cwd=ROOT)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    assert "smoke test passed" in proc.stdout
