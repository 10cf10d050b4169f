"""Chroma's own options parse under --family chroma and are another family's error elsewhere."""

from __future__ import annotations

import pytest


def test_chroma_options_parse_and_belong_to_chroma():
    from dit_lora.config.parser import parse_config
    from dit_lora.core.errors import UserError

    cfg = parse_config(["--family", "chroma", "--pretrained_model_name_or_path", "m", "--chroma_shift", "3"],
                       needs_data=False)
    assert cfg.family_options.chroma_shift == 3.0
    assert parse_config(["--family", "chroma1", "--pretrained_model_name_or_path", "m"], needs_data=False).model.family == "chroma"
    with pytest.raises(UserError, match="chroma"):
        parse_config(["--family", "flux", "--pretrained_model_name_or_path", "m", "--chroma_shift", "3"], needs_data=False)
