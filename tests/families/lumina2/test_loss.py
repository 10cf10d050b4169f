"""Lumina 2's loss, written out by hand: the noise level drawn from the checkpoint's shift-6 table at the run's density
(diffusers' ``compute_density_for_timestep_sampling``), ``x_t = (1 - sigma) x0 + sigma eps``, the transformer given
``1 - sigma`` (Lumina2Pipeline's ``1 - t / 1000``) and the captions with their mask cut to the cached length, the
weighted MSE against ``x0 - eps``. On the tiny transformer: one Euler step of the pipeline's own sampler with the
negated prediction lands where the target says."""

from __future__ import annotations

import pytest
import torch
from diffusers import FlowMatchEulerDiscreteScheduler
from diffusers.training_utils import compute_density_for_timestep_sampling, compute_loss_weighting_for_sd3

from helpers import Recorder
from dit_lora.config import TrainConfig
from dit_lora.contract.family import Components
from dit_lora.families.lumina2.state import Lumina2Run
from dit_lora.modeling.flow_matching import training_scheduler
from dit_lora.registry import get_family


def _batch(seed=0):
    gen = torch.Generator().manual_seed(seed)
    mask = (torch.arange(10).expand(3, 10) < torch.tensor([[4], [10], [7]])).long()
    return {"latents": torch.randn(3, 4, 8, 6, generator=gen), "prompt_embeds": torch.randn(3, 10, 12, generator=gen),
            "prompt_attention_mask": mask}


@pytest.mark.parametrize("scheme", ["none", "logit_normal", "cosmap"])
def test_loss_is_the_hand_computed_reversed_flow_loss(scheme):
    batch, state = {**_batch(), "caption_lengths": [4, 8, 7]}, Lumina2Run(text_tokens=8)
    comps = Components(model=None, scheduler=training_scheduler({"shift": 6.0}), state=state)
    seen = []

    def denoiser(**kwargs):  # the Recorder's prediction, and the host counts the RoPE embedder would be given
        seen.append(state.caption_counts)
        return recorder(**kwargs)

    recorder = Recorder()
    cfg = TrainConfig.for_family("lumina2", pretrained_model_name_or_path="m", weighting_scheme=scheme)
    loss = get_family("lumina2").loss.compute_loss(comps, denoiser, batch, torch.Generator().manual_seed(5), cfg)
    assert seen == [[4, 8, 7]] and state.caption_counts is None  # only while the transformer runs

    latents, gen = batch["latents"], torch.Generator().manual_seed(5)
    noise = torch.randn(latents.shape, generator=gen)
    u = compute_density_for_timestep_sampling(scheme, 3, logit_mean=0.0, logit_std=1.0, mode_scale=1.29, generator=gen)
    scheduler = FlowMatchEulerDiscreteScheduler(num_train_timesteps=1000, shift=6.0)
    sigmas = scheduler.sigmas[(u * 1000).long().clamp(max=999)]
    noisy = (1 - sigmas.view(-1, 1, 1, 1)) * latents + sigmas.view(-1, 1, 1, 1) * noise
    weighting = compute_loss_weighting_for_sd3(scheme, sigmas=sigmas)
    expected = (weighting * (((noisy * 0.5 + 0.1) - (latents - noise)) ** 2).flatten(1).mean(1)).mean()
    torch.testing.assert_close(loss, expected, rtol=1e-6, atol=1e-7)
    (call,) = recorder.calls
    torch.testing.assert_close(call["hidden_states"], noisy)
    torch.testing.assert_close(call["timestep"], 1 - sigmas)  # the transformer's time: 1 is clean
    assert torch.equal(call["encoder_hidden_states"], batch["prompt_embeds"][:, :8])
    assert torch.equal(call["encoder_attention_mask"], batch["prompt_attention_mask"][:, :8])


def test_the_target_is_what_the_pipelines_euler_step_follows(tiny_lumina2):
    """The pipeline steps ``scheduler.step(-pred, t, x)``: with the prediction equal to the target ``x0 - eps``, a
    step from ``x_sigma`` lands on ``x_sigma'`` of the same ``x0`` and ``eps`` (the flow's straight line)."""
    from diffusers import Lumina2Pipeline

    pipe = Lumina2Pipeline.from_pretrained(tiny_lumina2, torch_dtype=torch.float32)
    scheduler = pipe.scheduler
    scheduler.set_timesteps(4)
    gen = torch.Generator().manual_seed(0)
    x0, eps = torch.randn(1, 4, 8, 8, generator=gen), torch.randn(1, 4, 8, 8, generator=gen)
    sigma, after = scheduler.sigmas[1], scheduler.sigmas[2]
    noisy = (1 - sigma) * x0 + sigma * eps
    scheduler._step_index = 1
    stepped = scheduler.step(-(x0 - eps), scheduler.timesteps[1], noisy).prev_sample
    torch.testing.assert_close(stepped, (1 - after) * x0 + after * eps, atol=1e-5, rtol=1e-5)
