"""families/sanavideo/samples.py: validation videos sample with the checkpoint's own scheduler, from its config."""

from __future__ import annotations

from dit_lora.contract.family import Components
from dit_lora.registry import get_family
from dit_lora.families.sanavideo.state import SanaVideoRun


def test_inference_scheduler_from_the_checkpoint_config():
    config = {"_class_name": "DPMSolverMultistepScheduler", "flow_shift": 8.0, "use_flow_sigmas": True,
              "prediction_type": "flow_prediction"}
    comps = Components(model=None, scheduler=None, encoders={}, state=SanaVideoRun(scheduler_config=config))
    sampler = get_family("sanavideo").samples.sampler(comps)
    assert type(sampler).__name__ == "DPMSolverMultistepScheduler" and sampler.config.flow_shift == 8.0
    # a config naming no diffusers class: flow-matching Euler, from that config
    comps.state.scheduler_config = {"shift": 3.0}
    euler = get_family("sanavideo").samples.sampler(comps)
    assert type(euler).__name__ == "FlowMatchEulerDiscreteScheduler" and euler.config.shift == 3.0
