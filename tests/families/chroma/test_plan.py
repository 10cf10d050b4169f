"""Chroma's memory plan: Chroma1-HD from the catalogue, planned a unit (1 double + 2 single blocks) at a time, its
8.9B transformer's weights, the step at 1024 px with checkpointing (the family's default)."""

from __future__ import annotations

import pytest


@pytest.mark.slow  # the 8.9B at 1024 px on fake tensors
def test_hd_plans_from_the_catalogue():
    from dit_lora.catalogue.defaults import choose_defaults
    from dit_lora.config.parser import parse_config
    from dit_lora.plan import make_plan
    from dit_lora.registry import get_family

    cfg = parse_config(["--family", "chroma", "--pretrained_model_name_or_path", "lodestones/Chroma1-HD"],
                       needs_data=False)
    family = get_family("chroma")
    chosen = choose_defaults(cfg, family)
    assert chosen.config.lora.rank == 16 and chosen.config.data.resolution == 1024
    plan = make_plan(chosen.config, family, device="cuda", entry=chosen.entry, both_settings=False)
    assert plan.depth == 19 and plan.catalogue_entry == "lodestones/Chroma1-HD"
    gib = 2**30
    assert 16 * gib < plan.weights["model"] < 17 * gib  # 8.9B parameters in bf16
    assert 8.5 * gib < plan.weights["text_encoder"] < 9.5 * gib  # T5-XXL's encoder, 4.8B in bf16
    assert [s.checkpointing for s in plan.steps] == [True] and plan.peak_memory_bytes < 40 * gib
