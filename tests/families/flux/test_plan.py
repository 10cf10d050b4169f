"""FLUX.1's memory plan: the full 12B from the catalogue, planned a unit (1 double + 2 single blocks) at a time, and
the ladder's answer on a 24 GB card."""

from __future__ import annotations

import pytest


@pytest.mark.slow  # the 12B at 1024 px on fake tensors
def test_dev_on_24_gb_needs_fp8():
    from dit_lora.catalogue.defaults import choose_defaults
    from dit_lora.config.parser import parse_config
    from dit_lora.plan import make_plan
    from dit_lora.registry import get_family

    cfg = parse_config(["--family", "flux", "--pretrained_model_name_or_path", "black-forest-labs/FLUX.1-dev"],
                       needs_data=False)
    family = get_family("flux")
    chosen = choose_defaults(cfg, family)
    plan = make_plan(chosen.config, family, device="cuda", entry=chosen.entry, both_settings=False)
    assert plan.depth == 19 and plan.catalogue_entry == "black-forest-labs/FLUX.1-dev"
    gib = 2**30
    assert 22 * gib < plan.weights["model"] < 23 * gib  # 11.9B parameters in bf16
    assert 20 * gib < plan.peak_memory_bytes < 30 * gib and [s.checkpointing for s in plan.steps] == [True]
