"""Z-Image test support: a run config built in code, and Hub-layout folders of Z-Image and Z-Image-Turbo rebuilt
offline from the catalogue's configs (real widths and heads, one main layer and one refiner layer per stack, a
Qwen3 text encoder cut to one layer with a locally trained tokenizer in Qwen's file set, random weights)."""

from __future__ import annotations

from pathlib import Path

from dit_lora.config import TrainConfig


def zimage_cfg(**values) -> TrainConfig:
    """A Z-Image config (nothing is read from it unless a test names a real folder)."""
    values = {"pretrained_model_name_or_path": "unused/zimage", "train_data_dir": "unused", "resolution": 64, **values}
    return TrainConfig.for_family("zimage", **values)


def tiny_components(seed: int = 0) -> dict:
    """The tiny demo pipeline's components in memory (fp32)."""
    from dit_lora.families.zimage.demo import build_tiny_zimage_components

    return build_tiny_zimage_components(seed)


__all__ = ["tiny_components", "zimage_cfg", "Path"]
