"""kit/sampling.py: the square-image validation call (the run's resolution and step count, a
generator seeded on the given device, no autograd), the family's own arguments passed through."""

from __future__ import annotations

from types import SimpleNamespace

import torch

from dit_lora.kit.sampling import square_images


class _Pipe:
    def __call__(self, *prompt, **kwargs):
        self.prompt, self.kwargs, self.grad = prompt, kwargs, torch.is_grad_enabled()
        return SimpleNamespace(images=["image"])


def test_the_call_has_the_run_size_steps_and_a_seeded_generator():
    cfg = SimpleNamespace(data=SimpleNamespace(resolution=64),
                          validation=SimpleNamespace(validation_inference_steps=3))
    pipe = _Pipe()
    assert square_images(pipe, cfg.data, cfg.validation, 7, "cpu", "a prompt", guidance_scale=4.5) == ["image"]
    generator = pipe.kwargs.pop("generator")
    assert pipe.prompt == ("a prompt",) and not pipe.grad
    assert pipe.kwargs == {"height": 64, "width": 64, "num_inference_steps": 3, "guidance_scale": 4.5}
    assert torch.equal(torch.rand(4, generator=generator), torch.rand(4, generator=torch.Generator().manual_seed(7)))


def test_checkpoint_sampler_builds_the_named_class_else_the_fallback_else_none():
    from diffusers import DDIMScheduler, UniPCMultistepScheduler

    from dit_lora.kit.sampling import checkpoint_sampler

    named = checkpoint_sampler({"_class_name": "UniPCMultistepScheduler", "num_train_timesteps": 7}, "DDIMScheduler")
    assert type(named) is UniPCMultistepScheduler and named.config.num_train_timesteps == 7
    assert type(checkpoint_sampler({"_class_name": "NotInDiffusers"}, "DDIMScheduler")) is DDIMScheduler
    assert type(checkpoint_sampler(None, "DDIMScheduler")) is DDIMScheduler
    assert checkpoint_sampler({"_class_name": "NotInDiffusers"}, None) is None  # the caller keeps its own
