"""Run configs of ``--family ltx2`` (or ``ltx2_i2v``) for the LTX-2 tests."""

from __future__ import annotations


def ltx2_cfg(model, family: str = "ltx2", **values):
    """A run config of ``family`` on ``model`` (the demo's caption length unless given), ``values`` on top."""
    from dit_lora.config import TrainConfig

    values.setdefault("max_sequence_length", 64)
    return TrainConfig.for_family(family, pretrained_model_name_or_path=str(model), **values)
