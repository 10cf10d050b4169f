"""families/sanavideo/adapter.py: the card's snippet loads the adapter into the task's stock pipeline (the first
frame for image-to-video, the instruction only as trained), the card's rows, the license."""

from __future__ import annotations

import pytest
from real_layout import write_configs
from sanavideo_layout import HUB_ID, sanavideo_cfg

from dit_lora.families.sanavideo.adapter import SanaVideoCard
from dit_lora.families.sanavideo.info import forget_infos
from dit_lora.families.sanavideo.spec import TASKS


@pytest.fixture
def folder(tmp_path):
    forget_infos()
    return write_configs(HUB_ID, tmp_path / "sv")


def test_snippets_per_task(folder):
    t2v = SanaVideoCard(TASKS["sanavideo"]).usage_snippet(
        sanavideo_cfg(pretrained_model_name_or_path=str(folder), validation_prompt="a cat"), "me/lora")
    assert "SanaVideoPipeline.from_pretrained" in t2v and 'pipe.load_lora_weights("me/lora")' in t2v
    assert "frames=81, height=480, width=832" in t2v and "rate=16" in t2v and "image=" not in t2v
    assert "complex_human_instruction" not in t2v and "use_resolution_binning=False" in t2v and "export_to_video(" not in t2v
    cfg = sanavideo_cfg("sanavideo_i2v", pretrained_model_name_or_path=str(folder), validation_image="f.png",
                        complex_human_instruction=False)
    i2v = SanaVideoCard(TASKS["sanavideo_i2v"]).usage_snippet(cfg, "me/lora")
    assert "SanaImageToVideoPipeline" in i2v and 'load_image("card_input.png")' in i2v and "image=image," in i2v
    assert "complex_human_instruction=None" in i2v
    compile(t2v, "t2v", "exec"), compile(i2v, "i2v", "exec")


def test_card_rows_license_and_sampler(folder):
    card = SanaVideoCard(TASKS["sanavideo"])
    settings = card.card_settings(sanavideo_cfg(pretrained_model_name_or_path=str(folder)))
    assert settings["flow_shift"] == 3.0 and settings["weighting_scheme"] == "logit_normal"
    assert settings["resolution"].startswith("81x480x832")
    assert card.base_model_license(sanavideo_cfg(pretrained_model_name_or_path=HUB_ID).model) == "apache-2.0"
    assert card.base_model_license(sanavideo_cfg(pretrained_model_name_or_path="me/other").model) is None
