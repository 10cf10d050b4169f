"""Krea 2's memory plan: Krea-2-Raw from the catalogue (its configs are diffusers' defaults, unconfirmed), 28
blocks of 12.9B parameters, the step at 1024 px with checkpointing (the family's default)."""

from __future__ import annotations

import pytest


@pytest.mark.slow  # the 12.9B at 1024 px on fake tensors
def test_raw_plans_from_the_catalogue():
    from dit_lora.catalogue.defaults import choose_defaults
    from dit_lora.config.parser import parse_config
    from dit_lora.plan import make_plan
    from dit_lora.registry import get_family

    cfg = parse_config(["--family", "krea2", "--pretrained_model_name_or_path", "krea/Krea-2-Raw"], needs_data=False)
    family = get_family("krea2")
    chosen = choose_defaults(cfg, family)
    assert chosen.config.lora.rank == 32 and chosen.config.data.resolution == 1024
    plan = make_plan(chosen.config, family, device="cuda", entry=chosen.entry, both_settings=False)
    assert plan.depth == 28 and plan.catalogue_entry == "krea/Krea-2-Raw"
    gib = 2**30
    assert 23 * gib < plan.weights["model"] < 25 * gib  # 12.9B parameters in bf16
    assert 7 * gib < plan.weights["text_encoder"] < 9 * gib  # Qwen3-VL-4B with its vision tower, bf16
    assert [s.checkpointing for s in plan.steps] == [True] and plan.peak_memory_bytes < 60 * gib
