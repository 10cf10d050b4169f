"""families/flux2/options.py: FLUX.2's own options and their defaults."""

from __future__ import annotations

import pytest
from flux2_configs import flux2_cfg

from dit_lora.config import parse_config
from dit_lora.core.errors import UserError


def test_defaults_and_values():
    options = flux2_cfg().family_options
    assert options.flux2_shift is None and options.flux2_train_guidance == 1.0
    assert options.weighting_scheme == "logit_normal" and options.flux2_demo_variant == "dev"
    assert flux2_cfg(flux2_shift=3.0, flux2_demo_variant="klein").family_options.flux2_shift == 3.0


def test_a_non_positive_shift_is_refused_naming_the_flag():
    args = ["--family", "flux2", "--pretrained_model_name_or_path", "x", "--train_data_dir", "y"]
    assert parse_config([*args, "--flux2_shift", "2.5"]).family_options.flux2_shift == 2.5
    with pytest.raises(UserError, match="--flux2_shift"):
        parse_config([*args, "--flux2_shift", "0"])
