"""Krea 2's own options parse under --family krea2 (or its aliases) and are another family's error elsewhere."""

from __future__ import annotations

import pytest


def test_krea2_options_parse_and_belong_to_krea2():
    from dit_lora.config.parser import parse_config
    from dit_lora.core.errors import UserError

    cfg = parse_config(["--family", "krea2", "--pretrained_model_name_or_path", "m", "--krea2_shift", "2"],
                       needs_data=False)
    assert cfg.family_options.krea2_shift == 2.0
    assert parse_config(["--family", "krea-2", "--pretrained_model_name_or_path", "m"], needs_data=False).model.family == "krea2"
    with pytest.raises(UserError, match="krea2"):
        parse_config(["--family", "flux", "--pretrained_model_name_or_path", "m", "--krea2_shift", "3"], needs_data=False)
