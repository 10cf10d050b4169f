"""A Sana run config built in code for the tests of tests/families/sana/ (nothing is read from it)."""

from __future__ import annotations

from dit_lora.config import TrainConfig


def sana_cfg(**values) -> TrainConfig:
    """A Sana config; with options by owner the Sana and flow-matching options go to family_options."""
    values = {"pretrained_model_name_or_path": "unused/sana", "train_data_dir": "unused", "resolution": 64, **values}
    return TrainConfig.for_family("sana", **values)
