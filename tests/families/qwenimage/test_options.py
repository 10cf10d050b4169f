"""families/qwenimage/options.py: the shift options and their defaults."""

from __future__ import annotations

import pytest

from dit_lora.config import TrainConfig, parse_config
from dit_lora.core.errors import UserError


def test_defaults_and_choices():
    options = TrainConfig.for_family("qwenimage").family_options
    assert (options.qwen_shift_mode, options.qwen_fixed_shift, options.weighting_scheme) == (
        "dynamic", 2.2, "logit_normal")
    assert TrainConfig.for_family("qwenimage", qwen_shift_mode="none").family_options.qwen_shift_mode == "none"
    with pytest.raises(UserError, match="qwen_shift_mode"):
        parse_config(["--family", "qwenimage", "--qwen_shift_mode", "sometimes"])
