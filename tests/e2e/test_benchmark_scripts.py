"""The GPU benchmark scripts still run: ``--smoke`` trains a scaled-down model for two steps on the CPU. Each
script runs as a fork of a warm interpreter (tests/support/warm.py: the libraries imported once a worker, not once a
script); the script's own module code, its imports of benchmarks/ and everything it runs are its own."""

from __future__ import annotations

import pytest

from helpers import ROOT
from warm import run_script

pytestmark = pytest.mark.slow  # each runs a benchmark script end to end (the GPU ones train two steps)


@pytest.mark.parametrize("script", ["sana/step_gpu.py", "cogvideox/step_gpu.py", "videollm/step_gpu.py",
                                    "wan/step_gpu.py", "wan/kernels_gpu.py", "common/family_step_gpu.py",
                                    "common/family_step_gpu.py --family flux", "hunyuanvideo15/step_gpu.py"])
def test_gpu_benchmark_smoke(script):
    script, *args = script.split()
    proc = run_script(ROOT / "benchmarks" / script, [*args, "--smoke"], timeout=300)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    assert "smoke test passed" in proc.stdout


def test_kernels_benchmark_smoke():
    """benchmarks/kernels/ops_gpu.py --smoke: every fused op (Triton interpreter) and CPU attention backend, tiny
    shapes, checked against the references; torch.compile runs for one op."""
    proc = run_script(ROOT / "benchmarks" / "kernels" / "ops_gpu.py", ["--smoke"], timeout=300)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    assert "smoke test passed" in proc.stdout


def test_caching_benchmark_smoke():
    """benchmarks/data/caching_cpu.py --smoke: 20 generated images of mixed aspect ratios, one fresh Sana demo run
    of this checkout; the caching phase is found in its log and the bucket table it logs counts what its cache
    holds."""
    proc = run_script(ROOT / "benchmarks" / "data" / "caching_cpu.py", ["--smoke"], timeout=300)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    assert "smoke test passed" in proc.stdout


def test_caption_benchmark_smoke():
    """benchmarks/videollm/caption.py --smoke: the tiny Qwen2.5-VL captions 3 images and a clip at batch 1 and 2
    through the command's own path; every file written, none failed."""
    proc = run_script(ROOT / "benchmarks" / "videollm" / "caption.py", ["--smoke"], timeout=300)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    assert "smoke test passed" in proc.stdout
