"""families/flux2/samples.py: the validation sampler and what the pipelines are called with."""

from __future__ import annotations

import torch
from diffusers import FlowMatchEulerDiscreteScheduler
from flux2_configs import flux2_cfg

from dit_lora.contract.family import Components
from dit_lora.families.flux2.demo import SCHEDULER_CONFIG
from dit_lora.families.flux2.samples import Flux2Samples, call_kwargs, inference_scheduler
from dit_lora.families.flux2.state import Flux2Run
from dit_lora.registry import get_family


def test_the_sampler_is_the_checkpoints_own_with_dynamic_shifting():
    training = FlowMatchEulerDiscreteScheduler()
    sampler = inference_scheduler(Components(model=None, scheduler=training,
                                             state=Flux2Run(scheduler_config=SCHEDULER_CONFIG)))
    assert isinstance(sampler, FlowMatchEulerDiscreteScheduler) and sampler.config.use_dynamic_shifting
    assert inference_scheduler(Components(model=None, scheduler=training)) is training


def test_call_kwargs_and_the_validation_prompt_encoders():
    cfg = flux2_cfg(validation_inference_steps=4, validation_guidance_scale=1.0, resolution=128)
    kwargs = call_kwargs(cfg, 2, torch.Generator())
    assert kwargs["height"] == kwargs["width"] == 128 and kwargs["num_inference_steps"] == 4
    assert kwargs["guidance_scale"] == 1.0 and kwargs["num_images_per_prompt"] == 2
    spec = get_family("flux2")
    assert isinstance(spec.samples, Flux2Samples) and spec.samples.encoders is spec.encoders
