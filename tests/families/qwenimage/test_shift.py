"""families/qwenimage/shift.py: the per-resolution shift of the training sigmas, against the pipeline's own
``calculate_shift`` and ``FlowMatchEulerDiscreteScheduler.set_timesteps(sigmas=..., mu=...)``, and by hand."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from diffusers import FlowMatchEulerDiscreteScheduler
from diffusers.pipelines.qwenimage.pipeline_qwenimage import calculate_shift

from dit_lora.catalogue.files import catalogue_of
from dit_lora.families.qwenimage.shift import image_seq_len, shift_factor, shifted_sigmas
from dit_lora.modeling.flow_matching import dynamic_mu

ENTRIES = catalogue_of("dit_lora.families.qwenimage").entries

CONFIG = ENTRIES[0].configs["scheduler/scheduler_config.json"]


@pytest.mark.parametrize("pixels", [(1328, 1328), (1024, 1024), (928, 1664), (512, 512), (64, 64)])
def test_mu_is_the_pipelines_calculate_shift_with_the_scheduler_config(pixels):
    seq = image_seq_len(pixels[0] // 8, pixels[1] // 8)
    expected = calculate_shift(seq, CONFIG["base_image_seq_len"], CONFIG["max_image_seq_len"], CONFIG["base_shift"],
                               CONFIG["max_shift"])
    assert dynamic_mu(seq, CONFIG) == pytest.approx(expected, abs=1e-12)


@pytest.mark.parametrize("time_shift_type", ["exponential", "linear"])
def test_dynamic_sigmas_are_the_schedulers_set_timesteps_with_mu(time_shift_type):
    """The scheduler with the checkpoint's config (less the inference-only terminal stretch) maps the same ``u``."""
    config = {k: v for k, v in CONFIG.items() if not k.startswith("_")}
    config.update(shift_terminal=None, time_shift_type=time_shift_type)
    scheduler = FlowMatchEulerDiscreteScheduler.from_config(config)
    u = np.array([0.95, 0.7, 0.5, 0.3, 0.05], dtype=np.float32)
    seq = image_seq_len(1328 // 8, 1328 // 8)
    mu = dynamic_mu(seq, config)
    scheduler.set_timesteps(sigmas=u, mu=mu)
    ours = shifted_sigmas(torch.from_numpy(u), shift_factor("dynamic", seq, config, 2.2))
    torch.testing.assert_close(ours, scheduler.sigmas[:-1], rtol=1e-6, atol=1e-6)
    torch.testing.assert_close(ours * 1000, scheduler.timesteps, rtol=1e-5, atol=1e-3)


def test_hand_computation_at_1328_px():
    """83 x 83 packed tokens: mu = 0.5 + (6889 - 256) * 0.4 / 7936, exp(mu) about 2.30 (musubi-tuner: "around 2.2")."""
    seq = image_seq_len(166, 166)
    assert seq == 6889
    mu = 0.5 + (6889 - 256) * (0.9 - 0.5) / (8192 - 256)
    factor = shift_factor("dynamic", seq, CONFIG, 2.2)
    assert factor == pytest.approx(math.exp(mu)) and 2.2 < factor < 2.4
    u = torch.tensor([0.0, 0.25, 0.5, 1.0])
    expected = torch.tensor([0.0, factor * 0.25 / (factor * 0.25 + 0.75), factor / (factor + 1), 1.0])
    torch.testing.assert_close(shifted_sigmas(u, factor), expected)


def test_fixed_shift_is_the_static_schedulers_and_none_is_identity():
    scheduler = FlowMatchEulerDiscreteScheduler(num_train_timesteps=1000, shift=2.2)  # static: shifted at init
    u = torch.arange(1000, 0, -1, dtype=torch.float32) / 1000
    torch.testing.assert_close(shifted_sigmas(u, shift_factor("fixed", 4096, CONFIG, 2.2)), scheduler.sigmas)
    torch.testing.assert_close(shifted_sigmas(u, shift_factor("none", 4096, CONFIG, 2.2)), u)
    with pytest.raises(ValueError):
        shift_factor("other", 1, CONFIG, 1.0)
