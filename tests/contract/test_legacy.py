"""TRANSITIONAL: an old-style family object serves as a spec until its family is converted."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from dit_lora.contract import capabilities as caps
from dit_lora.contract.family import ModelFamily
from dit_lora.contract.legacy import as_spec, spec_from_family
from dit_lora.contract.spec import FamilySpec
from dit_lora.core.errors import UserError


class _Old(ModelFamily):
    name = "old_style"
    pipeline_class_name = "OldPipeline"
    adapter_weight_name = "old.safetensors"
    capabilities = (caps.RunNotes,)

    def validate_config(self, cfg): ...
    def load_components(self, cfg, device): ...
    def data_handler(self, cfg): return ("handler", cfg)
    def compute_loss(self, comps, model, batch, generator, cfg): ...
    def save_adapter(self, output_dir, lora_state, lora_config): ...
    def load_pipeline_with_adapter(self, cfg, adapter_dir, device): ...
    def start_notes(self, cfg): return ["note"]
    def precision_notes(self, cfg): return []


def test_its_methods_become_the_components_and_its_declared_capabilities_the_optional_ones():
    family = _Old()
    spec = spec_from_family(family)
    assert isinstance(spec, FamilySpec) and spec.name == "old_style"
    assert spec.model is spec.loss is spec.adapter is family and spec.notes is family
    assert spec.samples is None and spec.capabilities == (caps.RunNotes,)
    assert spec.info.pipeline_class_name == "OldPipeline" and spec.info.adapter_weight_name == "old.safetensors"
    assert spec.data.data_handler("cfg", spec) == ("handler", "cfg")
    assert spec.data.build_data("cfg", spec, None, None) is None  # the standard data path
    assert spec_from_family(family) is spec and as_spec(family) is spec and as_spec(spec) is spec


def test_a_stand_in_that_is_no_model_family_passes_as_it_is():
    stand_in = SimpleNamespace(adapter=None)
    assert as_spec(stand_in) is stand_in


def test_a_declaration_it_does_not_implement_is_refused():
    class Liar(_Old):
        capabilities = (caps.Samples,)

    with pytest.raises(UserError, match="declares the Samples capability but does not implement"):
        spec_from_family(Liar())
