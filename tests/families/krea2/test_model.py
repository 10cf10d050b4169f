"""Krea 2's model checks: Krea-2-Turbo (step-distilled) refused by its model_index.json or its Hub id in one
paragraph; the text encoder's taps read from the folder; a size the pipeline cannot take refused."""

from __future__ import annotations

import json
import shutil

import pytest


def test_turbo_is_refused_and_the_taps_come_from_the_folder(tiny_krea2, tmp_path):
    import torch

    from dit_lora.config import TrainConfig
    from dit_lora.core.errors import UserError
    from dit_lora.registry import get_spec

    model = get_spec("krea2").model
    turbo = shutil.copytree(tiny_krea2, tmp_path / "turbo")
    index = json.loads((turbo / "model_index.json").read_text())
    (turbo / "model_index.json").write_text(json.dumps({**index, "is_distilled": True}))
    for path in (turbo, "krea/Krea-2-Turbo"):
        with pytest.raises(UserError) as refused:
            model.validate_config(TrainConfig.for_family("krea2", pretrained_model_name_or_path=str(path)))
        text = str(refused.value)
        assert "Krea-2-Turbo" in text and "krea/Krea-2-Raw" in text and "\n" not in text
    cfg = TrainConfig.for_family("krea2", pretrained_model_name_or_path=str(tiny_krea2), mixed_precision="no")
    model.validate_config(cfg)  # the demo passes
    assert model.load_components(cfg, torch.device("cpu")).state.select_layers == (1, 2, 3)
    with pytest.raises(UserError, match="divisible by 16"):
        model.validate_config(TrainConfig.for_family("krea2", pretrained_model_name_or_path=str(tiny_krea2),
                                                     resolution=72))
