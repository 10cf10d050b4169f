"""families/dit/samples.py: the validation sampler follows the checkpoint's scheduler config."""

from __future__ import annotations


import pytest
import torch
from diffusers import DDIMScheduler, DPMSolverMultistepScheduler

from dit_lora.contract.family import Components
from dit_lora.families.dit.samples import DiTSamples
from dit_lora.families.dit.state import DiTRun
from dit_lora.registry import get_family
from config_stand_in import stand_in


def test_the_sampler_is_the_checkpoints_own_else_ddim():
    named = Components(model=None, state=DiTRun(scheduler_config={"_class_name": "DPMSolverMultistepScheduler"}))
    sampler = get_family("dit").samples.sampler
    assert isinstance(sampler(named), DPMSolverMultistepScheduler)
    assert isinstance(sampler(Components(model=None)), DDIMScheduler)


def test_the_validation_prompt_goes_through_the_familys_encoders():
    spec = get_family("dit")
    assert isinstance(spec.samples, DiTSamples) and spec.samples.encoders is spec.encoders


def test_samples_before_the_label_map_exists_are_refused_in_words():
    comps = Components(model=torch.nn.Linear(1, 1), state=DiTRun())  # hand-built: inspect_samples never ran
    cfg = stand_in(validation_prompt="circle", num_validation_images=1)
    with pytest.raises(RuntimeError, match="label map"):
        get_family("dit").samples.generate(comps, comps.model, {}, cfg, seed=0)
