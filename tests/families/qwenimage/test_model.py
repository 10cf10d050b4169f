"""families/qwenimage/model.py: the resolution and text-length checks, loading, buckets, defaults, the demo."""

from __future__ import annotations

import pytest
import torch

from dit_lora.config import TrainConfig
from dit_lora.core.errors import UserError
from dit_lora.families.qwenimage.model import (
    BUCKETS,
    QwenImageDefaults,
    QwenImagePrecision,
    check_resolution,
    check_text_length,
)
from dit_lora.registry import get_family


def test_resolution_must_be_a_multiple_of_16():
    check_resolution(1328)
    with pytest.raises(UserError, match="1328 or 1344"):
        check_resolution(1330)


def test_text_length_at_most_1024():
    check_text_length(TrainConfig.for_family("qwenimage", max_sequence_length=1024))
    with pytest.raises(UserError, match="above 1024"):
        check_text_length(TrainConfig.for_family("qwenimage", max_sequence_length=2000))


def test_load_components_precision_and_state(tiny_qwenimage):
    spec = get_family("qwenimage")
    cfg = TrainConfig.for_family("qwenimage", pretrained_model_name_or_path=str(tiny_qwenimage), resolution=64)
    spec.model.validate_config(cfg)
    comps = spec.model.load_components(cfg, torch.device("cpu"))
    assert comps.model.dtype == torch.bfloat16 and comps.encoders["vae"].dtype == torch.float32
    assert not any(p.requires_grad for p in comps.model.parameters())
    assert comps.state.scheduler_config["max_shift"] == 0.9 and len(comps.state.latents_mean) == 4
    assert QwenImagePrecision().expected_dtypes(comps, cfg.weight_dtype)["vae"] == torch.float32
    assert BUCKETS.bucket_stride(cfg.model) == 16 and BUCKETS.square_only() is None and spec.image_buckets is BUCKETS
    assert QwenImageDefaults().generic_defaults(cfg.model, cfg.family_options)["resolution"][0] == 1024
