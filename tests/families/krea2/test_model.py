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
        assert "Krea-2-Turbo" in text and "--pretrained_model_name_or_path krea/Krea-2-Raw" in text and "\n" not in text
    cfg = TrainConfig.for_family("krea2", pretrained_model_name_or_path=str(tiny_krea2), mixed_precision="no")
    model.validate_config(cfg)  # the demo passes
    assert model.load_components(cfg, torch.device("cpu")).state.select_layers == (1, 2, 3)
    with pytest.raises(UserError, match="divisible by 16"):
        model.validate_config(TrainConfig.for_family("krea2", pretrained_model_name_or_path=str(tiny_krea2),
                                                     resolution=72))


@pytest.mark.parametrize("taps, why", [([1, 2], "2 layers where the transformer fuses num_text_layers=3"),
                                       ([1, 2, 5], "layer 5 of a text encoder with 3")])
def test_taps_the_folder_cannot_hold_are_refused_before_anything_is_cached(tiny_krea2, tmp_path, taps, why):
    from dit_lora.config import TrainConfig
    from dit_lora.core.errors import UserError
    from dit_lora.registry import get_spec

    folder = shutil.copytree(tiny_krea2, tmp_path / "taps")
    index = json.loads((folder / "model_index.json").read_text())
    (folder / "model_index.json").write_text(json.dumps({**index, "text_encoder_select_layers": taps}))
    import re

    with pytest.raises(UserError, match=re.escape(f"text_encoder_select_layers={taps}: {why}") + ".*Fix text_encoder"):
        get_spec("krea2").model.validate_config(TrainConfig.for_family("krea2", pretrained_model_name_or_path=str(folder)))


def test_the_embedders_timestep_network_text_fusion_and_output_stay_out_of_quantization():
    from dit_lora.config import TrainConfig
    from dit_lora.contract.spec import quantize_skip_modules
    from dit_lora.registry import get_spec

    skipped = quantize_skip_modules(get_spec("krea2"))
    assert {"img_in", "time_embed", "time_mod_proj", "txt_in", "text_fusion", "final_layer"} <= set(skipped)
