"""Lumina 2's memory plan: Lumina-Image 2.0 from the catalogue (its RoPE embedder given the planned captions' full
counts: the fake mask has no values to read), the 2.6B transformer's and Gemma-2-2B's weights, a 1024 px step with checkpointing (the family's default) well inside 16 GB."""

from __future__ import annotations

import pytest


@pytest.mark.slow  # the 2.6B at 1024 px on fake tensors
def test_lumina_image_2_plans_from_the_catalogue():
    from dit_lora.catalogue.defaults import choose_defaults
    from dit_lora.config.parser import parse_config
    from dit_lora.plan import make_plan
    from dit_lora.registry import get_family

    cfg = parse_config(["--family", "lumina2", "--pretrained_model_name_or_path", "Alpha-VLLM/Lumina-Image-2.0"],
                       needs_data=False)
    family = get_family("lumina2")
    chosen = choose_defaults(cfg, family)
    assert chosen.config.lora.rank == 4 and chosen.config.data.resolution == 1024
    plan = make_plan(chosen.config, family, device="cuda", entry=chosen.entry)  # both settings: `dit-lora plan`'s
    assert plan.depth == 26 and plan.catalogue_entry == "Alpha-VLLM/Lumina-Image-2.0"
    gib = 2**30
    assert 4.5 * gib < plan.weights["model"] < 5.2 * gib  # 2.6B parameters in bf16
    assert 4.5 * gib < plan.weights["text_encoder"] < 5.2 * gib  # Gemma-2-2B (its 256k-token embedding included)
    with_checkpointing = next(s for s in plan.steps if s.checkpointing)  # the family's default
    without = next(s for s in plan.steps if not s.checkpointing)
    assert with_checkpointing.activation_bytes < 4 * gib < 16 * gib < without.activation_bytes
    assert plan.peak_memory_bytes < 10 * gib
