"""families/zimage/loss.py: the flow-matching loss in Z-Image's conventions, checked against a hand computation
(diffusers' ``train_dreambooth_lora_z_image.py`` written out), against the pipeline's own scheduler and sampling
step (the target and the time flip reproduce the sampler's trajectory), and on the real transformer."""

from __future__ import annotations

import pytest
import torch
from diffusers import FlowMatchEulerDiscreteScheduler
from zimage_layout import zimage_cfg

from dit_lora.catalogue import by_hub_id
from dit_lora.contract.family import Components
from dit_lora.kit.caption_flow import reversed_target, reversed_time
from dit_lora.families.zimage.loss import caption_lengths
from dit_lora.modeling.flow_matching import flow_tables, training_scheduler
from dit_lora.registry import get_family


class Recorder(torch.nn.Module):
    """A stand-in transformer with Z-Image's call signature that records its inputs."""

    def __init__(self):
        super().__init__()
        self.calls = []

    def forward(self, x, t, cap_feats, return_dict=True):
        self.calls.append((x, t, cap_feats, return_dict))
        return ([xi * 0.5 - 0.1 for xi in x],)


def _batch(bsz=3, tokens=10, width=8, seed=0):
    gen = torch.Generator().manual_seed(seed)
    return {"latents": torch.randn(bsz, 4, 8, 6, generator=gen), "prompt_embeds": torch.randn(bsz, tokens, width,
            generator=gen), "caption_lengths": [4, 10, 7]}


def test_the_loss_is_the_hand_computed_flow_matching_loss():
    spec, batch = get_family("zimage"), _batch()
    comps = Components(model=None, scheduler=training_scheduler({"shift": 3.0}))
    model = Recorder()
    loss = spec.loss.compute_loss(comps, model, batch, torch.Generator().manual_seed(5), zimage_cfg())
    # diffusers' script, written out: uniform u (weighting none), index into the shifted table
    gen = torch.Generator().manual_seed(5)
    x0 = batch["latents"]
    noise = torch.randn(x0.shape, generator=gen)
    indices = (torch.rand(3, generator=gen) * 1000).long()
    scheduler = FlowMatchEulerDiscreteScheduler(num_train_timesteps=1000, shift=3.0)
    sigma = scheduler.sigmas[indices].view(-1, 1, 1, 1)
    noisy = (1 - sigma) * x0 + sigma * noise
    pred = -(noisy * 0.5 - 0.1)  # diffusers negates the prediction and compares with noise - x0
    expected = ((pred - (noise - x0)) ** 2).mean()
    torch.testing.assert_close(loss, expected, rtol=1e-6, atol=1e-7)
    ((x, t, caps, return_dict),) = model.calls
    assert return_dict is False and [tuple(xi.shape) for xi in x] == [(4, 1, 8, 6)] * 3
    torch.testing.assert_close(torch.stack(x).squeeze(2), noisy)
    torch.testing.assert_close(t, (1000 - scheduler.timesteps[indices]) / 1000)  # ZImagePipeline's time flip
    assert [c.shape[0] for c in caps] == [4, 10, 7]
    assert all(torch.equal(c, batch["prompt_embeds"][i, :n]) for i, (c, n) in enumerate(zip(caps, [4, 10, 7])))


def test_target_and_time_reproduce_the_pipelines_sampling_step():
    """A transformer that predicts the target exactly, driven as ZImagePipeline drives it (output negated, then
    FlowMatchEulerDiscreteScheduler.step with the checkpoint's scheduler config), lands on the interpolation at
    the next sigma: the loss trains the function the sampler integrates."""
    config = by_hub_id("Tongyi-MAI/Z-Image-Turbo").configs["scheduler/scheduler_config.json"]
    scheduler = FlowMatchEulerDiscreteScheduler.from_config(config)
    scheduler.set_timesteps(sigmas=torch.linspace(1.0, 1 / 8, 8).tolist(), mu=0.5)
    gen = torch.Generator().manual_seed(0)
    x0, noise = torch.randn(2, 4, 8, 8, generator=gen), torch.randn(2, 4, 8, 8, generator=gen)
    for i in range(3):
        sigma, following = scheduler.sigmas[i], scheduler.sigmas[i + 1]
        x_t = (1 - sigma) * x0 + sigma * noise
        assert torch.allclose(reversed_time(scheduler.timesteps[i]), 1 - sigma, atol=1e-6)
        out = reversed_target(x0, noise)  # what the loss trains the transformer to output
        stepped = scheduler.step(-out, scheduler.timesteps[i], x_t, return_dict=False)[0]
        torch.testing.assert_close(stepped, (1 - following) * x0 + following * noise, rtol=1e-5, atol=1e-5)


def test_the_training_tables_are_the_checkpoints_scheduler():
    """The training schedule is the checkpoint's static shift (no dynamic shifting in either release)."""
    for hub_id, shift in (("Tongyi-MAI/Z-Image-Turbo", 3.0), ("Tongyi-MAI/Z-Image", 6.0)):
        config = by_hub_id(hub_id).configs["scheduler/scheduler_config.json"]
        assert config["shift"] == shift and config["use_dynamic_shifting"] is False
        sigmas, timesteps = flow_tables(training_scheduler(config), "cpu")
        reference = FlowMatchEulerDiscreteScheduler.from_config(config)
        assert torch.equal(sigmas, reference.sigmas) and torch.equal(timesteps, reference.timesteps)
        torch.testing.assert_close(reversed_time(timesteps), 1 - sigmas)


@pytest.mark.parametrize("cached", [True, False])
def test_prepare_batch_reads_caption_lengths_on_the_host(cached):
    spec = get_family("zimage")
    lengths = torch.tensor([3, 5])
    batch = {"latents": torch.zeros(2, 4, 8, 8), "prompt_embeds": torch.zeros(2, 6, 8), "prompt_lengths": lengths}

    class Encoders:
        def encode_prompts(self, comps, captions):
            return {"prompt_embeds": torch.zeros(2, 6, 8), "prompt_lengths": lengths}

        def encode_images(self, comps, pixels):
            return torch.zeros(2, 4, 8, 8)

    loss = type(spec.loss)(Encoders())
    raw = {"caption": ["a", "b"], "pixel_values": torch.zeros(2, 3, 64, 64), "sample_index": [0, 1]}
    out = loss.prepare_batch(Components(model=None), batch if cached else raw, "cpu", cached)
    assert out["caption_lengths"] == [3, 5] and caption_lengths(out) == [3, 5]
    assert caption_lengths({"prompt_embeds": torch.zeros(2, 6, 8)}) == [6, 6]  # a planned batch: full captions


def test_the_loss_trains_the_real_transformer(tiny):
    spec = get_family("zimage")
    model = tiny["transformer"]
    comps = Components(model=model, scheduler=training_scheduler({"shift": 3.0}))
    batch = {"latents": torch.randn(2, 4, 16, 16), "prompt_embeds": torch.randn(2, 12, 48), "caption_lengths": [5, 12]}
    loss = spec.loss.compute_loss(comps, model, batch, torch.Generator().manual_seed(0), zimage_cfg())
    assert loss.ndim == 0 and torch.isfinite(loss) and loss.dtype == torch.float32
    loss.backward()
    assert model.layers[0].attention.to_q.weight.grad is not None
    model.zero_grad(set_to_none=True)
