"""diffusion/options.py: the flow-matching option group, shared by inheritance (one declaration per option)."""

from __future__ import annotations

from dataclasses import fields

from dit_lora.modeling.timestep_options import FlowMatchingOptions, LogitNormalOptions


def test_groups_and_defaults():
    assert [f.name for f in fields(LogitNormalOptions)] == ["logit_mean", "logit_std"]
    options = FlowMatchingOptions()
    assert (options.weighting_scheme, options.logit_mean, options.logit_std, options.mode_scale) == (
        "logit_normal", 0.0, 1.0, 1.29)


def test_families_inherit_the_group_they_read():
    from dit_lora.families.cogvideox.options import CogVideoXOptions
    from dit_lora.families.sana.options import SanaOptions

    assert issubclass(SanaOptions, FlowMatchingOptions)
    assert issubclass(CogVideoXOptions, LogitNormalOptions) and not issubclass(CogVideoXOptions, FlowMatchingOptions)
    shared = {f.name: f for f in fields(LogitNormalOptions)}
    for cls in (SanaOptions, CogVideoXOptions):  # the very same field objects: one help text, one range
        assert all(shared[f.name] is f for f in fields(cls) if f.name in shared)
