"""families/sana/samples.py: the validation sampler follows the checkpoint's scheduler config."""

from __future__ import annotations

from diffusers import DPMSolverMultistepScheduler, FlowMatchEulerDiscreteScheduler

from dit_lora.contract.family import Components
from dit_lora.families.sana.samples import SanaSamples, inference_scheduler
from dit_lora.families.sana.state import SanaRun
from dit_lora.modeling.flow_matching import training_scheduler
from dit_lora.registry import get_family


def test_the_sampler_is_the_checkpoints_own():
    training = training_scheduler({"shift": 3.0})
    dpm = Components(model=None, scheduler=training,
                     state=SanaRun(scheduler_config={"_class_name": "DPMSolverMultistepScheduler"}))
    assert isinstance(inference_scheduler(dpm), DPMSolverMultistepScheduler)
    euler = Components(model=None, scheduler=training, state=SanaRun(scheduler_config={"shift": 3.0}))
    assert isinstance(inference_scheduler(euler), FlowMatchEulerDiscreteScheduler)
    assert inference_scheduler(Components(model=None, scheduler=training)) is training  # no config: the training one


def test_the_validation_prompt_goes_through_the_familys_encoders():
    spec = get_family("sana")
    assert isinstance(spec.samples, SanaSamples) and spec.samples.encoders is spec.encoders


def test_the_reloaded_pipeline_encodes_prompts_at_the_trained_caption_length():
    """The final samples from the reloaded SanaPipeline encode the prompt at --max_sequence_length, as training did
    (the pipeline's own 300 otherwise); Z-Image, Qwen-Image, FLUX.2 and SANA-Video pass theirs the same way."""
    from dit_lora.config import TrainConfig
    from dit_lora.families.sana.samples import SanaSamples
    from dit_lora.registry import get_spec

    for value, expected in ((None, 300), (120, 120)):
        cfg = TrainConfig.for_family("sana", pretrained_model_name_or_path="unused", train_data_dir="unused",
                                     max_sequence_length=value)
        assert SanaSamples(get_spec("sana").encoders).prompt_kwargs(cfg, 1)["max_sequence_length"] == expected
