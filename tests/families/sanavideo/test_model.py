"""families/sanavideo/model.py: the folder checks (another VAE, a missing validation image: one paragraph each),
the training shift, the notes and the defaults (the planned components: test_plan.py)."""

from __future__ import annotations

import json

import pytest
from real_layout import write_configs
from sanavideo_layout import HUB_ID, sanavideo_cfg

from dit_lora.core.errors import UserError
from dit_lora.families.sanavideo.info import forget_infos
from dit_lora.families.sanavideo.model import DEFAULTS, SanaVideoNotes, training_shift
from dit_lora.families.sanavideo.spec import TASKS
from dit_lora.registry import get_family


@pytest.fixture
def folder(tmp_path):
    forget_infos()
    return write_configs(HUB_ID, tmp_path / "sv")


def test_another_vae_and_a_missing_validation_image_are_refused(folder, monkeypatch):
    spec = get_family("sanavideo_i2v")
    monkeypatch.setattr("dit_lora.kit.loader.check_safetensors", lambda *a: None)  # configs only
    monkeypatch.setattr("dit_lora.kit.loader.check_tokenizer_packages", lambda *a: None)
    cfg = sanavideo_cfg("sanavideo_i2v", pretrained_model_name_or_path=str(folder), validation_image="nope.png")
    with pytest.raises(UserError, match="--validation_image `nope.png` does not exist"):
        spec.model.validate_config(cfg)
    vae = json.loads((folder / "vae" / "config.json").read_text())
    (folder / "vae" / "config.json").write_text(json.dumps({**vae, "_class_name": "AutoencoderDC"}))
    forget_infos()
    with pytest.raises(UserError, match="with a AutoencoderDC VAE; dit-lora trains .* Wan 2.1 VAE"):
        spec.model.validate_config(cfg)


def test_training_shift_notes_and_defaults(folder):
    cfg = sanavideo_cfg(pretrained_model_name_or_path=str(folder))
    assert training_shift(cfg) == 3.0 and training_shift(sanavideo_cfg(flow_shift=5.0)) == 5.0
    notes = SanaVideoNotes(TASKS["sanavideo_i2v"]).start_notes(cfg)
    assert "image-to-video" in notes[0] and "81x480x832" in notes[0] and "16 fps" in notes[0]
    assert "training shift 3" in notes[1] and "sampler shifts by 8" in notes[1]
    assert DEFAULTS.generic_defaults(cfg.model, cfg.family_options)["train_batch_size"][0] == 1
