"""modeling/timestep_options.py: the option groups the diffusion families share, one declaration per option; each group
flat (built on nothing), listed beside the others by the family classes that read it."""

from __future__ import annotations

from dataclasses import FrozenInstanceError, fields

import pytest

from dit_lora.config import owners
from dit_lora.modeling import timestep_options
from dit_lora.modeling.timestep_options import FlowMatchingOptions, LogitNormalOptions, TimestepSamplingOptions

#: every option group of the module
GROUPS = [cls for name, cls in vars(timestep_options).items()
          if name.endswith("Options") and isinstance(cls, type) and cls.__module__ == timestep_options.__name__]


def test_groups_and_defaults():
    assert [f.name for f in fields(LogitNormalOptions)] == ["logit_mean", "logit_std"]
    assert [f.name for f in fields(FlowMatchingOptions)] == ["weighting_scheme", "mode_scale"]
    assert [f.name for f in fields(TimestepSamplingOptions)] == ["timestep_sampling"]
    flow, density = FlowMatchingOptions(), LogitNormalOptions()
    assert (flow.weighting_scheme, density.logit_mean, density.logit_std, flow.mode_scale) == (
        "logit_normal", 0.0, 1.0, 1.29)


def test_each_group_is_a_flat_frozen_dataclass():
    """Built on nothing (a family's class sits one level above it, tests/config/test_option_depth.py)."""
    assert len(GROUPS) == 8
    for group in GROUPS:
        with pytest.raises(FrozenInstanceError):  # frozen, as the family classes listing it must be
            setattr(group(), fields(group)[0].name, None)
        assert group.__bases__ == (object,), f"{group.__name__} is built on {group.__bases__}"


def test_families_inherit_the_group_they_read():
    from dit_lora.families.cogvideox.options import CogVideoXOptions
    from dit_lora.families.sana.options import SanaOptions

    assert issubclass(SanaOptions, FlowMatchingOptions) and issubclass(SanaOptions, LogitNormalOptions)
    assert issubclass(CogVideoXOptions, LogitNormalOptions) and not issubclass(CogVideoXOptions, FlowMatchingOptions)
    shared = {f.name: f for f in fields(LogitNormalOptions)}
    for cls in (SanaOptions, CogVideoXOptions):  # the very same field objects: one help text, one range
        assert all(shared[f.name] is f for f in fields(cls) if f.name in shared)
    # --help lists them in this order: the density's two right before the flow-matching scheme that reads them
    assert [f.name for f in fields(SanaOptions)] == [
        "trim_text_padding", "complex_human_instruction", "logit_mean", "logit_std", "weighting_scheme", "mode_scale"]


def test_every_family_reading_a_density_lists_the_logit_normal_group_too():
    """--weighting_scheme logit_normal and --timestep_sampling logit_normal read --logit_mean/--logit_std: a family's
    class that lists one of those groups lists :class:`LogitNormalOptions` beside it (every registered family)."""
    readers = {family: owners.options_class(family) for family in owners.known_families()}
    readers = {family: cls for family, cls in readers.items()
               if issubclass(cls, (FlowMatchingOptions, TimestepSamplingOptions))}
    assert {"sana", "wan", "cogvideox", "flux", "zimage"} <= set(readers)
    missing = [family for family, cls in readers.items() if not issubclass(cls, LogitNormalOptions)]
    assert not missing, f"these families read a timestep density without --logit_mean/--logit_std: {missing}"
