"""families/cogvideox/options.py: CogVideoX's flags for both tasks; the conditioning-image ones for I2V only."""

import pytest

from dit_lora.config import parse_config
from dit_lora.core.errors import UserError

MIN = ["--pretrained_model_name_or_path", "org/model", "--train_data_dir", "data"]


def test_cogvideox_flags():
    cfg = parse_config(MIN + ["--family", "cogvideox", "--timestep_sampling", "logit_normal", "--logit_mean", "-1",
                              "--loss_weight_cap", "20", "--enable_tiling", "false", "--demo_cogvideox_version", "1.5"])
    o = cfg.family_options
    assert (o.timestep_sampling, o.logit_mean, o.loss_weight_cap, o.enable_tiling, o.demo_cogvideox_version) == (
        "logit_normal", -1.0, 20.0, False, "1.5")
    with pytest.raises(UserError, match="--noised_image_dropout is an option of the cogvideox_i2v family"):
        parse_config(MIN + ["--family", "cogvideox", "--noised_image_dropout", "0.1"])


def test_i2v_flags_include_the_t2v_ones():
    cfg = parse_config(MIN + ["--family", "cogvideox_i2v", "--noised_image_dropout", "0.1", "--first_frame_noise",
                              "false", "--validation_image", "a.png", "--loss_weight_cap", "5"])
    o = cfg.family_options
    assert (o.noised_image_dropout, o.first_frame_noise, o.validation_image, o.loss_weight_cap) == (
        0.1, False, "a.png", 5.0)
