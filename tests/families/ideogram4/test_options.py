"""Ideogram 4 reads the shared flow-matching options (its --logit_std defaulted to the pipeline's 1.5 at resolve
time), under --family ideogram4 or its aliases; it has no option of its own."""

from __future__ import annotations

from dataclasses import fields


def test_ideogram4_reads_the_shared_flow_matching_group():
    from dit_lora.config.parser import parse_config
    from dit_lora.families.ideogram4.options import Ideogram4Options
    from dit_lora.modeling.timestep_options import FlowMatchingOptions, LogitNormalOptions

    shared = {f.name for group in (FlowMatchingOptions, LogitNormalOptions) for f in fields(group)}
    assert {f.name for f in fields(Ideogram4Options)} == shared
    cfg = parse_config(["--family", "ideogram-4", "--pretrained_model_name_or_path", "m", "--logit_mean", "0.5"],
                       needs_data=False)  # fmt: skip
    assert cfg.model.family == "ideogram4" and cfg.family_options.logit_mean == 0.5
    assert cfg.family_options.logit_std == 1.0  # the parser's; the family's 1.5 comes with the defaults (test_plan)
