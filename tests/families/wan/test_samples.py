"""families/wan/samples.py: the validation call takes the first bucket's size and the validation options, and
samples with the checkpoint's own scheduler (UniPC when its config names none)."""

from __future__ import annotations

from types import SimpleNamespace

from dit_lora.contract.family import Components
from dit_lora.families.wan.samples import WanSamples
from dit_lora.families.wan.state import WanRun
from config_stand_in import stand_in


def test_call_kwargs_take_the_first_bucket_and_the_validation_options():
    task = SimpleNamespace(video_buckets=lambda cfg: [(9, 64, 96), (5, 32, 32)])
    cfg = stand_in(validation_inference_steps=3, validation_guidance_scale=5.0)
    generator = object()
    assert WanSamples(task, None).call_kwargs(cfg, generator, 1) == {
        "num_frames": 9, "height": 64, "width": 96, "num_inference_steps": 3, "guidance_scale": 5.0,
        "generator": generator, "output_type": "pil",
    }


def test_the_checkpoints_scheduler_samples_and_unipc_without_one():
    def sampler(config):
        state = WanRun(scheduler_config=config)
        return WanSamples(None, None).sampler(Components(model=None, scheduler=None, encoders={}, state=state))

    flow = sampler({"_class_name": "FlowMatchEulerDiscreteScheduler", "shift": 5.0})
    assert type(flow).__name__ == "FlowMatchEulerDiscreteScheduler" and flow.config.shift == 5.0
    assert type(sampler({"flow_shift": 3.0})).__name__ == "UniPCMultistepScheduler"
