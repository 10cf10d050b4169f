"""families/cogvideox/samples.py: the validation sampler and the pipeline call's arguments (sampling on tiny
pipelines is in test_spec.py)."""

from __future__ import annotations

from diffusers import CogVideoXDDIMScheduler, CogVideoXDPMScheduler

from dit_lora.config import TrainConfig
from dit_lora.contract.family import Components
from dit_lora.families.cogvideox.samples import inference_scheduler
from dit_lora.families.cogvideox.state import CogVideoXRun
from dit_lora.registry import get_family


def test_the_sampler_is_the_checkpoints_own_else_the_training_schedulers_class():
    training = CogVideoXDDIMScheduler()
    dpm = dict(CogVideoXDPMScheduler().config, _class_name="CogVideoXDPMScheduler")
    comps = Components(model=None, scheduler=training, state=CogVideoXRun(scheduler_config=dpm))
    assert type(inference_scheduler(comps)) is CogVideoXDPMScheduler
    assert type(inference_scheduler(Components(model=None, scheduler=training))) is CogVideoXDDIMScheduler


def test_call_kwargs_take_the_first_bucket_and_the_validation_settings():
    cfg = TrainConfig(family="cogvideox", pretrained_model_name_or_path="THUDM/CogVideoX-5b", height=480, width=720,
                      max_num_frames=49, validation_inference_steps=3)
    kwargs = get_family("cogvideox").samples.call_kwargs(cfg, None, 1)
    assert (kwargs["num_frames"], kwargs["height"], kwargs["width"]) == (49, 480, 720)
    assert kwargs["num_inference_steps"] == 3 and "image" not in kwargs
