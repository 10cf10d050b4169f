"""FLUX.1's own options parse under --family flux and are another family's error elsewhere."""

from __future__ import annotations

import pytest


def test_flux_options_parse_and_belong_to_flux():
    from dit_lora.config.parser import parse_config
    from dit_lora.core.errors import UserError

    cfg = parse_config(["--family", "flux", "--pretrained_model_name_or_path", "m", "--flux_shift", "3",
                        "--flux_train_guidance", "3.5"], needs_data=False)
    assert cfg.family_options.flux_shift == 3.0 and cfg.family_options.flux_train_guidance == 3.5
    assert parse_config(["--family", "flux.1", "--pretrained_model_name_or_path", "m"], needs_data=False).model.family == "flux"
    with pytest.raises(UserError, match="flux"):
        parse_config(["--family", "sana", "--pretrained_model_name_or_path", "m", "--flux_shift", "3"], needs_data=False)
