"""A DiT run config built in code for the tests of tests/families/dit/ (a tiny model, class folders, an output)."""

from __future__ import annotations

from pathlib import Path

from dit_lora.config import TrainConfig


def dit_cfg(model: Path, data: Path, out: Path, **kw) -> TrainConfig:
    """A DiT config at the tiny model's 64 px, fp32, rank 4; ``kw`` overrides (``num_classes`` to family_options)."""
    values = {"family": "dit", "pretrained_model_name_or_path": str(model), "train_data_dir": str(data),
              "output_dir": str(out), "resolution": 64, "mixed_precision": "no", "rank": 4, "lora_alpha": 8, "seed": 0}
    return TrainConfig.for_family(**{**values, **kw})
