"""Optional capabilities: declared, checked at registration with the missing member named, found by capability()."""

from __future__ import annotations

import pytest

from dit_lora.core.errors import UserError
from dit_lora.registry import available, get_family
from dit_lora.contract import capabilities as caps
from dit_lora.contract.family import ModelFamily
from dit_lora.contract.spec import COMPONENTS, FamilySpec


class _Base(ModelFamily):
    name = "toy_caps"

    def validate_config(self, cfg): ...
    def load_components(self, cfg, device): ...
    def data_handler(self, cfg): ...
    def compute_loss(self, comps, model, batch, generator, cfg): ...
    def save_adapter(self, output_dir, lora_state, lora_config): ...
    def load_pipeline_with_adapter(self, cfg, adapter_dir, device): ...


@pytest.mark.parametrize("name", available())
def test_every_registered_family_implements_what_it_declares(name):
    family = get_family(name)
    if isinstance(family, FamilySpec):  # a converted family: each filled component implements its field's protocol
        assert all(isinstance(getattr(family, field), proto) for field, proto in COMPONENTS.items()
                   if getattr(family, field) is not None)
        return
    caps.check_capabilities(family)
    caps.check_capabilities(type(family))
    for proto in family.capabilities:
        assert caps.capability(family, proto) is family
        assert isinstance(family, proto)  # runtime-checkable: the members are there


def test_a_declared_capability_without_its_method_is_refused_naming_it():
    class HalfSamples(_Base):
        capabilities = (caps.Samples,)

        def validation_inputs(self, comps, cfg): ...
        def generate(self, comps, model, cond, cfg, seed): ...
        def save_sample(self, sample, stem, cfg): ...

    with pytest.raises(UserError, match=r"declares the Samples capability but does not implement "
                                        r"generate_with_pipeline"):
        caps.check_capabilities(HalfSamples)


def test_a_missing_attribute_member_is_named_too():
    class NoCaptions(_Base):
        capabilities = (caps.Captions,)
        requires_captions = True

    with pytest.raises(UserError, match="does not implement caption_source"):
        caps.check_capabilities(NoCaptions())


def test_something_that_is_not_a_capability_is_refused():
    class Odd(_Base):
        capabilities = (dict,)

    with pytest.raises(UserError, match="capabilities are the protocols"):
        caps.check_capabilities(Odd)


def test_fused_kernels_is_a_capability_with_kernel_patch_points():
    assert caps.members(caps.FusedKernels) == ["kernel_patch_points"]


def test_undeclared_capabilities_fall_back_to_the_defaults(tmp_path):
    from types import SimpleNamespace

    import torch

    from dit_lora.contract import spec as fallback
    from dit_lora.contract.legacy import spec_from_family

    family = _Base()
    spec = spec_from_family(family)
    cfg = SimpleNamespace(train_backbone=["x"], weight_dtype=torch.bfloat16)
    assert caps.capability(family, caps.Trainables) is None and spec.trainables is None
    assert fallback.backbone_patterns(spec, cfg) == ["x"] and fallback.extra_trainable(spec, cfg) == []
    assert fallback.expected_dtypes(spec, None, cfg) == {"model": torch.bfloat16}
    assert fallback.quantize_skip_modules(spec, cfg) == [] and fallback.generic_defaults(spec, cfg) == {}
    assert fallback.start_notes(spec, cfg) == [] and fallback.precision_notes(spec, cfg) == []
    assert fallback.requires_captions(spec) is True and fallback.caption_source(spec) == "captions"
    with pytest.raises(UserError, match="--demo needs the Demo capability"):
        fallback.require(spec, "demo", "--demo")


def test_a_method_present_but_undeclared_is_not_used():
    """Declaration, not probing: a hook the family has but does not declare is never called."""
    from types import SimpleNamespace

    from dit_lora.contract import spec as fallback
    from dit_lora.contract.legacy import spec_from_family

    class Undeclared(_Base):
        def backbone_patterns(self, cfg):
            raise AssertionError("called without being declared")

    assert fallback.backbone_patterns(spec_from_family(Undeclared()), SimpleNamespace(train_backbone=[])) == []


def test_exports_is_a_capability_and_is_checked():
    assert caps.Exports in caps.ALL
    assert caps.members(caps.Exports) == ["export_adapter", "export_formats"]

    class FormatsOnly(_Base):
        capabilities = (caps.Exports,)

        def export_formats(self):
            return {"x": "y"}

    with pytest.raises(UserError, match="declares the Exports capability but does not implement export_adapter"):
        caps.check_capabilities(FormatsOnly)
