"""families/sanavideo/options.py: the defaults are NVlabs' trainer's, and the groups are shared, not redeclared."""

from __future__ import annotations

from sanavideo_layout import sanavideo_cfg

from dit_lora.config.owners import owners
from dit_lora.families.sanavideo.options import TRAINING_SHIFT, SanaVideoI2VOptions, SanaVideoOptions
from dit_lora.modeling.timestep_options import CaptionInstructionOptions, ConditioningImageOptions


def test_defaults_are_nvlabs_trainers():
    opts = sanavideo_cfg().family_options
    assert isinstance(opts, SanaVideoOptions) and TRAINING_SHIFT == 3.0
    assert (opts.weighting_scheme, opts.logit_mean, opts.logit_std) == ("logit_normal", 0.0, 1.0)
    assert opts.flow_shift is None and opts.complex_human_instruction is True


def test_image_to_video_adds_the_conditioning_image_and_the_instruction_is_one_shared_flag():
    assert issubclass(SanaVideoI2VOptions, ConditioningImageOptions)
    assert not issubclass(SanaVideoOptions, ConditioningImageOptions)
    assert issubclass(SanaVideoOptions, CaptionInstructionOptions)
    assert set(owners("complex_human_instruction")) == {"sana", "sanavideo", "sanavideo_i2v"}
    assert "sanavideo_i2v" in owners("validation_image") and "sanavideo" not in owners("validation_image")
