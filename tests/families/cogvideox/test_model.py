"""families/cogvideox/model.py: the model component's policies (precision, defaults); loading and the checks on tiny
pipelines are in test_spec.py."""

from __future__ import annotations

import torch

from dit_lora.config import TrainConfig
from dit_lora.families.cogvideox.model import DEFAULTS, CogVideoXPrecision
from dit_lora.registry import get_family


def test_precision_keeps_every_module_in_the_weight_dtype():
    cfg = TrainConfig(family="cogvideox", mixed_precision="bf16")
    assert CogVideoXPrecision().expected_dtypes(None, cfg.weight_dtype) == {
        "model": torch.bfloat16, "vae": torch.bfloat16, "text_encoder": torch.bfloat16}
    assert CogVideoXPrecision().quantize_skip_modules() == []


def test_one_clip_per_step_by_default_and_the_task_on_the_model():
    assert DEFAULTS.generic_defaults(None, None)["train_batch_size"][0] == 1
    assert get_family("cogvideox").model.task == "t2v" and get_family("cogvideox_i2v").model.task == "i2v"
