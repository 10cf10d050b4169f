"""Lumina 2's own options parse under --family lumina2 (and its aliases) and are another family's error elsewhere."""

from __future__ import annotations

import pytest


def test_lumina2_options_parse_and_belong_to_lumina2():
    from dit_lora.config.parser import parse_config
    from dit_lora.core.errors import UserError

    cfg = parse_config(["--family", "lumina2", "--pretrained_model_name_or_path", "m", "--system_prompt", "Be terse.",
                        "--weighting_scheme", "logit_normal"], needs_data=False)
    assert cfg.family_options.system_prompt == "Be terse." and cfg.family_options.weighting_scheme == "logit_normal"
    for alias in ("lumina", "lumina-2", "lumina-image-2"):
        assert parse_config(["--family", alias, "--pretrained_model_name_or_path", "m"],
                            needs_data=False).model.family == "lumina2"
    with pytest.raises(UserError, match="lumina2"):
        parse_config(["--family", "sana", "--pretrained_model_name_or_path", "m", "--system_prompt", "x"],
                     needs_data=False)
