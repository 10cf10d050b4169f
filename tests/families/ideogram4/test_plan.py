"""Ideogram 4's memory plan: ideogram-v4 from the catalogue (its configs are diffusers' defaults, unconfirmed), 34
blocks of the conditional transformer only (the unconditional one waits in host memory), every caption at the
pipeline's 2,048 tokens, the step at 1024 px with checkpointing (the family's default)."""

from __future__ import annotations

import pytest


@pytest.mark.slow  # the 9B at 1024 px on fake tensors
def test_v4_plans_from_the_catalogue():
    from dit_lora.catalogue.defaults import choose_defaults
    from dit_lora.config.parser import parse_config
    from dit_lora.plan import make_plan
    from dit_lora.registry import get_family

    argv = ["--family", "ideogram4", "--pretrained_model_name_or_path", "ideogram-ai/ideogram-v4"]
    cfg = parse_config(argv, needs_data=False)
    family = get_family("ideogram4")
    chosen = choose_defaults(cfg, family)
    assert chosen.config.lora.rank == 16 and chosen.config.data.resolution == 1024
    assert chosen.config.family_options.logit_std == 1.5  # the family's own option, defaulted as the pipeline samples
    plan = make_plan(chosen.config, family, device="cuda", entry=chosen.entry, both_settings=False)
    assert plan.depth == 34 and plan.catalogue_entry == "ideogram-ai/ideogram-v4"
    gib = 2**30
    assert 17 * gib < plan.weights["model"] < 18 * gib  # one transformer: 9.3B parameters in bf16
    assert 14 * gib < plan.weights["text_encoder"] < 16 * gib  # Qwen3-VL-8B with its vision tower, bf16
    assert [s.checkpointing for s in plan.steps] == [True] and plan.peak_memory_bytes < 40 * gib


def test_a_users_logit_std_wins_over_the_familys_default():
    from dit_lora.catalogue.defaults import choose_defaults
    from dit_lora.config.parser import parse_config
    from dit_lora.registry import get_family

    argv = ["--family", "ideogram4", "--pretrained_model_name_or_path", "ideogram-ai/ideogram-v4", "--logit_std", "1.0"]
    chosen = choose_defaults(parse_config(argv, needs_data=False), get_family("ideogram4"))
    assert chosen.config.family_options.logit_std == 1.0 and "logit_std" not in chosen.applied
