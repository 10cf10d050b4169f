"""The kernels' runtime (``KernelRuntime``): kernel modes, the sampled checks and their fallbacks, the no-Triton
path, and the check's tolerance as a property."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
import torch

from dit_lora.kernels.attention import attention_reference, resolve_backend
from dit_lora.kernels.defaults import choose_impl
from dit_lora.kernels.monitor import KernelRuntime

from helpers import ROOT


def _qkv(batch=3, heads=2, q_len=37, kv_len=37, dim=16, dtype=torch.float32, seed=0):
    gen = torch.Generator().manual_seed(seed)
    return [torch.randn(batch, heads, n, dim, generator=gen).to(dtype) for n in (q_len, kv_len, kv_len)]


def test_kernel_modes():
    assert choose_impl("modulate", "cpu", "off")[0] == "eager"
    impl, note = choose_impl("modulate", "cpu", "auto")
    assert impl == "eager" and "1.5x" in note  # nothing measured faster on a CPU
    with pytest.raises(ValueError, match="auto, on, off"):
        choose_impl("modulate", "cpu", "fast")


# ---- the sampled checks ------------------------------------------------------------------------
def _modulate_reference(x, scale, shift):
    return torch.nn.functional.layer_norm(x, x.shape[-1:]) * (1 + scale[:, None]) + shift[:, None]


def _opendit_modulate(x, scale, shift):
    # The OpenDiT bug: every sample modulated with sample 0's row.
    return _modulate_reference(x, scale[:1].expand_as(scale), shift[:1].expand_as(shift))


def _runtime(fast, reference=_modulate_reference) -> KernelRuntime:
    rt = KernelRuntime(device=torch.device("cpu"), check_interval=10)
    rt.ops["modulate"] = (fast, reference)
    rt.enabled["modulate"] = True
    rt.impl["modulate"] = "triton"
    return rt


def _inputs(batch=3):
    gen = torch.Generator().manual_seed(0)
    x = torch.randn(batch, 5, 8, generator=gen, requires_grad=True)
    return x, torch.randn(batch, 8, generator=gen).requires_grad_(), torch.randn(batch, 8, generator=gen)


def test_check_switches_off_a_kernel_that_mixes_up_samples_and_the_reference_takes_over():
    rt = _runtime(_opendit_modulate)
    assert rt.due(1) and not rt.due(2) and rt.due(10) and not rt.due(11)
    rt.arm(1)
    for _ in range(4):  # several calls in the step: one is sampled
        rt.call("modulate", *_inputs())
    assert rt.finish_check(1) is True
    assert rt.enabled["modulate"] is False
    (record,) = rt.fallbacks
    assert record["kernel"] == "modulate" and record["step"] == 1 and "disagreed" in record["reason"]
    x, s, t = _inputs()
    assert torch.equal(rt.call("modulate", x, s, t), _modulate_reference(x, s, t))
    summary = rt.summary({"modulate": 2})
    assert summary["implementations"]["modulate"] == "reference" and summary["fallbacks"] == [record]
    json.dumps(summary)


def test_check_catches_non_finite_output_and_gradients_and_passes_a_good_kernel():
    def nan_backward(x, scale, shift):  # right forward, NaN backward
        return _NanGrad.apply(_modulate_reference(x, scale, shift))

    rt = _runtime(nan_backward)
    rt.arm(7)
    rt.call("modulate", *_inputs())
    assert rt.finish_check(7) and "non-finite" in rt.fallbacks[0]["reason"] and "gradient" in rt.fallbacks[0]["reason"]

    good = _runtime(lambda x, s, t: _modulate_reference(x, s, t) * (1 + 1e-7))
    good.arm(1)
    good.call("modulate", *_inputs())
    assert good.finish_check(1) is False and good.enabled["modulate"] and good.checks == 1


class _NanGrad(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        return x.clone()

    @staticmethod
    def backward(ctx, g):
        return g * float("nan")


def test_data_that_is_already_non_finite_is_inconclusive_not_a_kernel_fault():
    rt = _runtime(_modulate_reference)
    rt.arm(1)
    x, s, t = _inputs()
    with torch.no_grad():
        x[0, 0, 0] = float("nan")
    rt.call("modulate", x, s, t)
    assert rt.finish_check(1) is False and rt.enabled["modulate"] and rt.inconclusive == 1


def test_calls_outside_a_check_step_or_without_grad_capture_nothing():
    rt = _runtime(_opendit_modulate)
    rt.call("modulate", *_inputs())
    rt.arm(3)
    with torch.no_grad():
        rt.call("modulate", *_inputs())
    assert rt.finish_check(3) is False and rt.enabled["modulate"]


def test_attention_that_fails_its_check_moves_to_a_safer_backend():
    rt = KernelRuntime(device=torch.device("cpu"), check_interval=0)
    rt.attention_backend = resolve_backend("sdpa", "cpu")
    rt.enabled["attention"] = True
    broken = lambda q, k, v, m: rt._fast_attention(q, k, v, m) * float("nan")  # noqa: E731
    rt.ops["attention"] = (broken, attention_reference)
    rt.arm(1)
    rt.attention(*_qkv(), None)
    assert rt.finish_check(1)
    assert rt.attention_backend.name == "math" and rt.fallbacks[0]["from"] == "sdpa"


@pytest.mark.slow
def test_without_triton_interpreter_on_cpu_patching_keeps_references_and_says_so_once(tmp_path):
    script = (
        "import logging, torch\n"
        "logging.basicConfig(level=logging.WARNING)\n"
        "from diffusers import SanaTransformer2DModel\n"
        "from dit_lora.families.sana.demo import get_tiny_sana_config\n"
        "from dit_lora.families.sana.kernels import patch_points\n"
        "from dit_lora.kernels import patch_model\n"
        "m = SanaTransformer2DModel(**get_tiny_sana_config('tiny')['transformer'])\n"
        "print(patch_model(m, patch_points(), kernels='on'))\n"
        "print(patch_model(m, patch_points(), kernels='on'))\n"
    )
    env = dict(os.environ)
    env.pop("TRITON_INTERPRET", None)
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, env=env, cwd=ROOT, timeout=120)
    assert proc.returncode == 0, proc.stderr
    counts = [eval(line) for line in proc.stdout.splitlines() if line.startswith("{")]
    assert len(counts) == 2
    for c in counts:
        assert c["modulate"] == c["linear_attention"] == c["layernorm"] == 0 and c["attention"] == 2
    assert proc.stderr.count("TRITON_INTERPRET=1") == 1, proc.stderr


# ---- the tolerance as a property ------------------------------------------------------------------
def _check_errors_script(args: list[str]) -> subprocess.CompletedProcess:
    """The benchmark script's run, forked from a warm interpreter (tests/support/warm.py): the property is what it
    prints, not its process starting, so the libraries' imports are paid once a worker, not once a run."""
    from warm import run_script

    return run_script(ROOT / "benchmarks" / "kernels" / "check_errors.py", args, timeout=600)


@pytest.mark.slow  # a run of a script in another process (a warm fork), as the marker says
def test_healthy_attention_never_trips_the_check_and_broken_attention_always_does():
    """Hundreds of random shapes, magnitudes (1e-2..1e2), masks (bool/additive, per-sample padding), fp32 and
    bf16, autocast on and off, every CPU backend: zero false trips; every NaN and >= 90% of wrong rows caught."""
    proc = _check_errors_script(["--trials", "150", "--broken_trials", "25", "--small", "--ops", "attention",
                                 "--seed", "11"])
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-2000:]
    assert "| attention:sdpa | float32 | 150 | 0 |" in proc.stdout


@pytest.mark.slow
def test_healthy_fused_kernels_never_trip_the_check_and_broken_ones_always_do():
    """The same property for every Triton op under the interpreter (sample mix-up, NaN, wrong row caught)."""
    proc = _check_errors_script(["--trials", "16", "--broken_trials", "8", "--small", "--seed", "12",
                                 "--ops", "modulate,gated_residual,rms_norm,linear_attention"])
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-2000:]
    assert "sample_mixup" in proc.stdout and "| modulate | bfloat16 | 16 | 0 |" in proc.stdout
