"""A FLUX.2 run config built in code for the tests of tests/families/flux2/ (nothing is read from it)."""

from __future__ import annotations

from dit_lora.config import TrainConfig


def flux2_cfg(**values) -> TrainConfig:
    """A FLUX.2 config; the FLUX.2 and flow-matching options go to family_options."""
    values = {"pretrained_model_name_or_path": "unused/flux2", "train_data_dir": "unused", "resolution": 64, **values}
    return TrainConfig.for_family("flux2", **values)
