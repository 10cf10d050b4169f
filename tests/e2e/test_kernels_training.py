"""The kernels inside real training runs: a 10-step A/B against diffusers' own modules, and the
sampled check catching a sample-mixing modulate kernel mid-run."""

from __future__ import annotations

import sys

import pytest
import torch

pytest.importorskip("triton")

from helpers import base_args, free_port, read_summary, run_recipe  # noqa: E402
from helpers import train_in_process as _train  # noqa: E402

STEPS = 10


def _losses(summary: dict) -> list[float]:
    return [loss for _, loss in summary["loss_history"]]


@pytest.mark.slow
def test_ten_steps_with_and_without_kernels_agree(tiny_sana, shapes_data, tmp_path):
    # max_consecutive_skips 1 makes the guard's window one step, so loss_history has every step's loss.
    # 32 px and batch 2: the interpreted Triton kernels cost per token, and 10 steps still show the loss falling.
    common = {"max_train_steps": STEPS, "validation_steps": 5, "max_consecutive_skips": 1, "lr_scheduler": "constant",
              "lr_warmup_steps": 0, "kernel_check_interval": 5, "resolution": 32, "train_batch_size": 2}
    off, _ = _train(tiny_sana, shapes_data, tmp_path / "off", kernels="off", **common)
    on, _ = _train(tiny_sana, shapes_data, tmp_path / "on", kernels="on", attention_backend="math", **common)
    assert isinstance(off, dict) and isinstance(on, dict), (off, on)
    assert off["kernels"]["patched"] == dict.fromkeys(off["kernels"]["patched"], 0)
    patched = on["kernels"]["patched"]
    assert patched["modulate"] == patched["gated_residual"] == patched["linear_attention"] == 2
    assert patched["attention"] == 2
    assert on["kernels"]["implementations"]["modulate"] == "triton"
    assert on["kernels"]["implementations"]["attention"] == "math"
    assert on["kernels"]["checks"] == 3 and on["kernels"]["fallbacks"] == []  # steps 1, 5, 10
    assert on["skipped_steps"] == off["skipped_steps"] == 0
    a, b = _losses(off), _losses(on)
    assert len(a) == len(b) == STEPS
    worst = max(abs(x - y) / abs(x) for x, y in zip(a, b))
    assert worst < 5e-3, worst  # measured 3.3e-4
    assert sum(b[-5:]) < sum(b[:5])  # and it trains


@pytest.mark.slow
def test_a_sample_mixing_kernel_is_switched_off_at_the_first_check_and_its_step_skipped(tiny_sana, shapes_data,
                                                                                       tmp_path):
    summary, out = _train(tiny_sana, shapes_data, tmp_path, kernels="on", max_train_steps=4,
                          inject_faults="broken_kernel", kernel_check_interval=0)
    assert isinstance(summary, dict), summary
    (fallback,) = summary["kernels"]["fallbacks"]
    assert fallback["kernel"] == "modulate" and fallback["step"] == 1 and fallback["to"] == "reference"
    assert "disagreed" in fallback["reason"]
    assert summary["kernels"]["implementations"]["modulate"] == "reference"
    assert summary["skipped_steps"] == 1 and summary["applied_updates"] == 3
    # A vetoed step is not a non-finite one: no diagnosis, no step toward a rollback.
    assert summary["nonfinite_report"] is None and summary["rollbacks"] == 0
    assert summary["nonfinite_losses"] == summary["nonfinite_grads"] == 0
    assert summary["kernels"]["implementations"]["gated_residual"] == "triton"  # only the faulty op goes


@pytest.mark.slow
def test_without_the_canary_the_first_kernel_check_moves_a_nan_attention_backend_to_math(tiny_sana, shapes_data,
                                                                                        tmp_path):
    from dit_lora.training.canary import restore_sdpa_backends, sdpa_backend_flags

    flags, sdpa = sdpa_backend_flags(), torch.nn.functional.scaled_dot_product_attention
    try:
        summary, _ = _train(tiny_sana, shapes_data, tmp_path, inject_faults="broken_attention",
                            attention_canary="false", max_train_steps=5)
    finally:
        torch.nn.functional.scaled_dot_product_attention = sdpa
        restore_sdpa_backends(flags)
    assert isinstance(summary, dict), summary
    (fallback,) = summary["kernels"]["fallbacks"]
    assert fallback["kernel"] == "attention" and (fallback["from"], fallback["to"]) == ("sdpa", "math")
    assert "non-finite" in fallback["reason"] and summary["kernels"]["attention_backend"] == "math"
    assert summary["skipped_steps"] == 1 and summary["applied_updates"] == 4 and summary["final_loss"] is not None


@pytest.mark.slow
def test_a_kernel_failing_on_one_process_is_switched_off_on_both(tiny_sana, shapes_data, tmp_path):
    out = tmp_path / "out"
    launcher = [sys.executable, "-m", "accelerate.commands.launch", "--multi_gpu", "--num_processes", "2",
                "--num_machines", "1", "--mixed_precision", "bf16", "--dynamo_backend", "no", "--main_process_port",
                str(free_port())]
    proc = run_recipe(base_args(tiny_sana, shapes_data, out, tmp_path / "cache", train_batch_size=2,
                                max_train_steps=3, kernels="on", inject_faults="broken_kernel:rank1",
                                attention_canary="false"), launcher=launcher, timeout=400, warm=True)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    summary = read_summary(out)  # written by rank 0, whose own kernel was fine
    assert summary["num_processes"] == 2 and summary["engine"] == "MULTI_CPU"
    (fallback,) = summary["kernels"]["fallbacks"]
    assert fallback["kernel"] == "modulate" and fallback["step"] == 1
    assert fallback["reason"] == "its check failed on another process"
    assert summary["skipped_steps"] == 1 and summary["applied_updates"] == 2


@pytest.mark.slow
@pytest.mark.parametrize("resolution,seed,batch", [(32, 0, 2), (32, 1, 2), (32, 2, 3), (64, 3, 4), (64, 4, 3)])
def test_default_flags_never_flag_a_healthy_kernel(tiny_sana, shapes_data, tmp_path, resolution, seed, batch):
    """What a new user runs: default flags (kernels auto, canary, checks) at small sizes. The fp32 attention
    check used to fail at step 1 on rounding (5.6e-8 > 5e-8), skip it and drop to math attention."""
    summary, _ = _train(tiny_sana, shapes_data, tmp_path, resolution=resolution, center_crop="true", seed=seed,
                        train_batch_size=batch, max_train_steps=3, attention_canary="true", kernel_check_interval=1)
    assert isinstance(summary, dict), summary
    kernels = summary["kernels"]
    assert kernels["checks"] == 3 and kernels["fallbacks"] == [] and summary["skipped_steps"] == 0, kernels
