"""dit_lora.modeling.flow_matching against diffusers' own scheduler and the rectified-flow formulas."""

from __future__ import annotations

import math

import pytest
import torch
from diffusers import FlowMatchEulerDiscreteScheduler
from diffusers.training_utils import compute_density_for_timestep_sampling

from dit_lora.modeling import flow_matching as fm


@pytest.mark.parametrize("config, shift, steps", [
    ({}, 1.0, 1000),
    ({"shift": 3.0}, 3.0, 1000),
    ({"flow_shift": 3.0, "shift": 1.0}, 3.0, 1000),  # Sana's DPM-Solver configs: flow_shift wins
    ({"flow_shift": None, "shift": 2.5, "num_train_timesteps": 250}, 2.5, 250),
])
def test_training_scheduler_reads_the_checkpoint_shift(config, shift, steps):
    scheduler = fm.training_scheduler(config)
    reference = FlowMatchEulerDiscreteScheduler(num_train_timesteps=steps, shift=shift)
    assert scheduler.config.shift == shift and scheduler.config.num_train_timesteps == steps
    sigmas, timesteps = fm.flow_tables(scheduler, "cpu")
    assert torch.equal(sigmas, reference.sigmas) and torch.equal(timesteps, reference.timesteps)
    assert sigmas.shape == timesteps.shape == (steps,)


def test_tables_follow_the_shifted_sigma_formula():
    """sigma(s) = shift s / (1 + (shift - 1) s) for s = t / N, t = N..1; timestep = sigma N."""
    sigmas, timesteps = fm.flow_tables(fm.training_scheduler({"shift": 3.0}), torch.device("cpu"))
    s = torch.arange(1000, 0, -1, dtype=torch.float32) / 1000
    assert torch.allclose(sigmas, 3.0 * s / (1 + 2.0 * s), atol=1e-6)
    assert torch.allclose(timesteps, sigmas * 1000, atol=1e-4)
    assert sigmas[0] == 1.0 and bool((sigmas[1:] < sigmas[:-1]).all())  # index 0 is the noisiest


@pytest.mark.parametrize("scheme", ["logit_normal", "mode", "none", "sigma_sqrt", "cosmap"])
def test_sample_indices_are_diffusers_density_floored(scheme):
    kwargs = {"logit_mean": 0.3, "logit_std": 1.2, "mode_scale": 1.29}
    got = fm.sample_indices(scheme, 7, 1000, generator=torch.Generator().manual_seed(4), **kwargs)
    u = compute_density_for_timestep_sampling(scheme, 7, generator=torch.Generator().manual_seed(4), **kwargs)
    assert got.dtype == torch.int64 and got.shape == (7,)
    assert torch.equal(got, (u * 1000).long().clamp(max=999))
    assert int(got.min()) >= 0 and int(got.max()) <= 999


def test_sample_indices_clamp_u_of_one():
    """A logit-normal draw far in the tail rounds to u = 1.0 in float32: the index stays inside the table."""
    assert fm.sample_indices("logit_normal", 3, 1000, logit_mean=200.0, logit_std=1.0).tolist() == [999] * 3


def test_logit_normal_mean_moves_the_indices():
    """A high logit mean draws u near 1: small sigmas (late table indices); a low one the opposite."""
    high = fm.sample_indices("logit_normal", 512, 1000, logit_mean=3.0, generator=torch.Generator().manual_seed(0))
    low = fm.sample_indices("logit_normal", 512, 1000, logit_mean=-3.0, generator=torch.Generator().manual_seed(0))
    assert high.float().mean() > 850 and low.float().mean() < 150


@pytest.mark.parametrize("shape", [(1, 4, 8, 8), (3, 4, 5, 7), (2, 13, 3, 6, 5), (5, 9)])
def test_noisy_latents_and_target_per_sample(shape):
    gen = torch.Generator().manual_seed(1)
    x0, eps = torch.randn(shape, generator=gen), torch.randn(shape, generator=gen)
    sigmas = torch.rand(shape[0], generator=gen)
    noisy = fm.noisy_latents(x0, eps, sigmas)
    for b in range(shape[0]):
        assert torch.allclose(noisy[b], (1 - sigmas[b]) * x0[b] + sigmas[b] * eps[b], atol=1e-6)
    assert torch.equal(fm.velocity_target(x0, eps), eps - x0)
    # the target is the derivative of x_t along sigma
    step = 1e-3
    ahead = fm.noisy_latents(x0, eps, sigmas + step)
    assert torch.allclose((ahead - noisy) / step, fm.velocity_target(x0, eps), atol=1e-2)


def test_noisy_latents_match_the_scheduler_scale_noise():
    """FlowMatchEulerDiscreteScheduler.scale_noise computes the same interpolation (one sigma for the batch)."""
    scheduler = fm.training_scheduler({"shift": 3.0})
    gen = torch.Generator().manual_seed(2)
    x0, eps = torch.randn(2, 4, 6, 6, generator=gen), torch.randn(2, 4, 6, 6, generator=gen)
    timestep = scheduler.timesteps[[250]]
    expected = scheduler.scale_noise(x0, timestep, eps)
    sigma = scheduler.sigmas[250].expand(2)
    assert torch.allclose(fm.noisy_latents(x0, eps, sigma), expected, atol=1e-6)


def test_noisy_latents_refuse_a_wrong_sigma_shape():
    with pytest.raises(ValueError, match=r"one value per sample \(\[3\]\)"):
        fm.noisy_latents(torch.zeros(3, 4), torch.zeros(3, 4), torch.zeros(2))


def test_loss_weighting_formulas():
    sigmas = torch.tensor([0.1, 0.5, 0.9, 1.0])
    assert torch.allclose(fm.loss_weighting("sigma_sqrt", sigmas), sigmas ** -2)
    assert torch.allclose(fm.loss_weighting("cosmap", sigmas), 2 / (math.pi * (1 - 2 * sigmas + 2 * sigmas ** 2)))
    for scheme in ("logit_normal", "mode", "none"):
        assert torch.equal(fm.loss_weighting(scheme, sigmas), torch.ones(4))
    assert fm.loss_weighting("sigma_sqrt", sigmas.to(torch.bfloat16)).dtype == torch.float32


def test_weighted_mse_is_the_batch_mean_of_weighted_sample_means():
    gen = torch.Generator().manual_seed(3)
    pred, target = torch.randn(3, 2, 5, 7, generator=gen), torch.randn(3, 2, 5, 7, generator=gen)
    weights = torch.tensor([1.0, 2.0, 0.5])
    expected = sum(weights[b] * ((pred[b] - target[b]) ** 2).mean() for b in range(3)) / 3
    got = fm.weighted_mse(pred.to(torch.bfloat16), target.to(torch.bfloat16), weights)
    assert got.dtype == torch.float32 and got.ndim == 0
    assert torch.allclose(fm.weighted_mse(pred, target, weights), expected, atol=1e-6)
    assert torch.allclose(got, expected, rtol=2e-2)


def test_draw_is_noise_then_indices_from_one_generator():
    """The order Sana's loss has always used: a run resumed from a checkpoint repeats it bit for bit."""
    tables = fm.flow_tables(fm.training_scheduler({"flow_shift": 3.0}), "cpu")
    latents = torch.zeros(4, 3, 5, 6, dtype=torch.bfloat16)
    got = fm.draw(latents, tables, "logit_normal", logit_mean=0.1, logit_std=0.9,
                  generator=torch.Generator().manual_seed(7))
    gen = torch.Generator().manual_seed(7)
    noise = torch.randn(latents.shape, generator=gen, dtype=torch.bfloat16)
    u = compute_density_for_timestep_sampling("logit_normal", 4, logit_mean=0.1, logit_std=0.9, mode_scale=None,
                                              generator=gen)
    indices = (u * 1000).long().clamp(max=999)
    assert torch.equal(got.noise, noise) and torch.equal(got.indices, indices)
    assert got.sigmas.dtype == torch.bfloat16 and torch.equal(got.sigmas, tables[0][indices].to(torch.bfloat16))
    assert got.timesteps.dtype == torch.float32 and torch.equal(got.timesteps, tables[1][indices])


def test_draw_uses_the_table_length_as_the_step_count():
    tables = fm.flow_tables(fm.training_scheduler({"num_train_timesteps": 10}), "cpu")
    got = fm.draw(torch.zeros(64, 2), tables, "none", generator=torch.Generator().manual_seed(0))
    assert int(got.indices.max()) <= 9 and len(set(got.indices.tolist())) > 5


def test_draw_takes_a_span_of_the_table_as_the_whole_of_its_own():
    """A two-expert Wan run's expert: the same draws as from a table of the span's length, offset to its first entry."""
    tables = fm.flow_tables(fm.training_scheduler({"flow_shift": 3.0}), "cpu")
    latents = torch.zeros(64, 2)
    got = fm.draw(latents, tables, "uniform", generator=torch.Generator().manual_seed(5), span=(250, 1000))
    short = tuple(table[:750] for table in tables)
    whole = fm.draw(latents, short, "uniform", generator=torch.Generator().manual_seed(5))
    assert torch.equal(got.noise, whole.noise) and torch.equal(got.indices, whole.indices + 250)
    assert int(got.indices.min()) >= 250 and torch.equal(got.timesteps, tables[1][got.indices])


def test_sampling_draw_reads_the_timestep_sampling_options():
    from types import SimpleNamespace

    tables = fm.flow_tables(fm.training_scheduler({"flow_shift": 3.0}), "cpu")
    options = SimpleNamespace(timestep_sampling="logit_normal", logit_mean=0.3, logit_std=0.7)
    latents = torch.zeros(8, 2)
    got = fm.sampling_draw(options, latents, tables, torch.Generator().manual_seed(2), span=(100, 900))
    want = fm.draw(latents, tables, "logit_normal", logit_mean=0.3, logit_std=0.7,
                   generator=torch.Generator().manual_seed(2), span=(100, 900))
    assert torch.equal(got.noise, want.noise) and torch.equal(got.indices, want.indices)


def test_the_schedulers_resolution_shift_and_both_written_forms():
    """scheduler_shift is the factor set_timesteps(mu=...) shifts by (exponential: exp(mu), linear: mu; a static
    config: its shift), and shifted_sigmas is the scheduler's time_shift in either written form."""
    config = {"use_dynamic_shifting": True, "base_shift": 0.5, "max_shift": 1.15, "shift": 3.0}
    mu = fm.dynamic_mu(1024, config)
    assert fm.scheduler_shift(1024, config) == math.exp(mu) == fm.dynamic_shift(1024, config)
    assert fm.scheduler_shift(1024, {**config, "time_shift_type": "linear"}) == mu
    assert fm.scheduler_shift(1024, {**config, "use_dynamic_shifting": False}) == 3.0
    scheduler = FlowMatchEulerDiscreteScheduler(use_dynamic_shifting=True)
    u = torch.linspace(0.0, 1.0, 33, dtype=torch.float64)
    for form in ("s*u+1-u", "1+(s-1)*u"):
        shifted = fm.shifted_sigmas(u, math.exp(mu), form=form)
        torch.testing.assert_close(shifted[1:], scheduler.time_shift(mu, 1.0, u[1:]))
        assert shifted[0] == 0 and shifted[-1] == 1
