"""Optional capabilities: a spec's component is checked against its protocol with the missing member named; a field
left None falls back to the default, and a hook on another component is never probed."""

from __future__ import annotations


import pytest
import torch
from spec_parts import TinyModel, tiny_spec

from dit_lora.contract import capabilities as caps
from dit_lora.contract import spec as fallback
from dit_lora.contract.spec import COMPONENTS
from dit_lora.core.errors import UserError
from dit_lora.registry import available, get_family
from config_stand_in import stand_in


@pytest.mark.parametrize("name", available())
def test_every_registered_family_implements_what_it_declares(name):
    family = get_family(name)  # each filled component implements its field's protocol
    assert all(isinstance(getattr(family, field), proto) for field, proto in COMPONENTS.items()
               if getattr(family, field) is not None)


def test_a_declared_capability_without_its_method_is_refused_naming_it():
    class HalfSamples:
        def validation_inputs(self, comps, validation): ...
        def generate(self, comps, model, cond, cfg, seed): ...
        def save_sample(self, sample, stem, cfg): ...

    with pytest.raises(UserError, match=r"`samples` component \(HalfSamples\) lacks generate_with_pipeline of the "
                                        r"Samples protocol"):
        tiny_spec("toy_caps", samples=HalfSamples())


def test_a_missing_attribute_member_is_named_too():
    class NoCaptions:
        requires_captions = True

    with pytest.raises(UserError, match="lacks caption_source of the Captions protocol"):
        tiny_spec("toy_caps", captions=NoCaptions())


def test_fused_kernels_is_a_capability_with_kernel_patch_points():
    assert caps.members(caps.FusedKernels) == ["kernel_patch_points"]


def test_a_read_only_member_is_a_member_too():
    """MemoryPlan.depth_key is a property (a frozen dataclass component holds it as a field): still checked."""
    assert caps.members(caps.MemoryPlan) == ["depth_key", "plan_batches", "plan_components", "plan_loss"]


def test_undeclared_capabilities_fall_back_to_the_defaults():
    spec = tiny_spec("toy_caps")
    cfg = stand_in(train_backbone=["x"], weight_dtype=torch.bfloat16)
    assert spec.trainables is None
    assert fallback.backbone_patterns(spec, cfg.lora, None) == ["x"] and fallback.extra_trainable(spec, None) == []
    assert fallback.expected_dtypes(spec, None, cfg.weight_dtype) == {"model": torch.bfloat16}
    assert fallback.quantize_skip_modules(spec) == [] and fallback.generic_defaults(spec, None, None) == {}
    assert fallback.start_notes(spec, cfg) == [] and fallback.precision_notes(spec, cfg) == []
    assert fallback.requires_captions(spec) is True and fallback.caption_source(spec) == "captions"
    with pytest.raises(UserError, match="--demo needs the Demo capability"):
        fallback.require(spec, "demo", "--demo")


def test_a_method_present_but_undeclared_is_not_used():
    """Declaration, not probing: a hook a component has but whose field is left None is never called."""

    class Undeclared(TinyModel):
        def backbone_patterns(self, lora, family_options):
            raise AssertionError("called without being declared")

    spec = tiny_spec("toy_caps", model=Undeclared())
    assert fallback.backbone_patterns(spec, stand_in(train_backbone=[]).lora, None) == []


def test_exports_is_a_capability_and_is_checked():
    assert caps.Exports in caps.ALL
    assert caps.members(caps.Exports) == ["export_adapter", "export_formats"]

    class FormatsOnly:
        def export_formats(self):
            return {"x": "y"}

    with pytest.raises(UserError, match="lacks export_adapter of the Exports protocol"):
        tiny_spec("toy_caps", exports=FormatsOnly())
