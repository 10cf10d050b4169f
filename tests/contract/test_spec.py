"""The family spec: required components checked with one paragraph, optional ones default to None, frozen."""

from __future__ import annotations

import dataclasses

import pytest
import torch

from dit_lora.contract import spec as fallback
from dit_lora.contract.capabilities import Samples, members
from dit_lora.contract.spec import OPTIONAL, REQUIRED, FamilyInfo, FamilySpec
from dit_lora.core.errors import UserError
from dit_lora.registry import available, get_spec
from config_stand_in import stand_in


class _Model:
    def validate_config(self, cfg): ...
    def load_components(self, cfg, device): ...
    def lora_targets(self, model, lora): return ["to_q"]


class _Data:
    def data_handler(self, cfg, spec): ...
    def build_data(self, cfg, spec, comps, accelerator): return None


class _Loss:
    def prepare_batch(self, comps, batch, device, cached): return batch
    def compute_loss(self, comps, model, batch, generator, cfg): return torch.zeros(())


class _Adapter:
    def save_adapter(self, output_dir, lora_state, lora_config): ...
    def load_pipeline_with_adapter(self, cfg, adapter_dir, device): ...


def _spec(**over) -> FamilySpec:
    parts = dict(name="tiny", info=FamilyInfo(pipeline_class_name="TinyPipeline"), model=_Model(), data=_Data(),
                 loss=_Loss(), adapter=_Adapter())
    return FamilySpec(**{**parts, **over})


def test_four_required_components_and_the_rest_default_to_none():
    spec = _spec()
    assert list(REQUIRED) == ["model", "data", "loss", "adapter"]
    assert all(getattr(spec, name) is None for name in OPTIONAL) and spec.capabilities == ()
    cfg = stand_in(train_backbone=["b"], weight_dtype=torch.float16)
    assert fallback.backbone_patterns(spec, cfg.lora, None) == ["b"]
    assert fallback.expected_dtypes(spec, None, cfg.weight_dtype) == {"model": torch.float16}
    assert fallback.bucket_stride(spec, None) == (None, "the `tiny` family declares no aspect-ratio buckets (ImageBuckets)")
    with pytest.raises(UserError, match="--validation_prompt needs the Samples capability"):
        fallback.require(spec, "samples", "--validation_prompt")


def test_a_missing_required_component_is_one_paragraph_naming_it_and_the_fix():
    with pytest.raises(UserError) as err:
        _spec(loss=None)
    text = str(err.value)
    assert "`tiny` family's spec has no `loss` component" in text and "compute_loss, prepare_batch" in text
    assert "\n" not in text


def test_a_component_missing_a_member_is_named():
    class HalfLoss:
        def prepare_batch(self, comps, batch, device, cached): ...

    with pytest.raises(UserError, match=r"`loss` component \(HalfLoss\) lacks compute_loss of the Loss protocol"):
        _spec(loss=HalfLoss())

    class HalfSamples:
        def generate(self, *a): ...

    with pytest.raises(UserError, match=r"`samples` component .* lacks .*save_sample.* or leave `samples` None"):
        _spec(samples=HalfSamples())


def test_an_optional_component_fills_its_capability():
    class Sampling:
        def validation_inputs(self, comps, validation): ...
        def generate(self, comps, model, cond, cfg, seed): ...
        def generate_with_pipeline(self, pipe, prompt, cfg, seed, num_images, comps=None): ...
        def save_sample(self, sample, stem, cfg): ...

    sampling = Sampling()
    spec = _spec(samples=sampling)
    assert spec.capabilities == (Samples,) and fallback.require(spec, "samples", "x") is sampling
    assert sorted(members(Samples)) == ["generate", "generate_with_pipeline", "save_sample", "validation_inputs"]


def test_a_spec_and_its_info_are_frozen():
    spec = _spec()
    with pytest.raises(dataclasses.FrozenInstanceError):
        spec.samples = object()
    with pytest.raises(dataclasses.FrozenInstanceError):
        spec.info.adapter_weight_name = "x.safetensors"


def test_the_info_needs_a_family_info_and_the_spec_a_name():
    with pytest.raises(UserError, match="must be a FamilyInfo"):
        _spec(info={"pipeline_class_name": "X"})
    with pytest.raises(UserError, match="needs a name"):
        _spec(name="")


@pytest.mark.parametrize("name", available())
def test_every_registered_family_has_a_spec(name):
    spec = get_spec(name)
    assert isinstance(spec, FamilySpec) and spec.name == name and spec.info.pipeline_class_name
    assert get_spec(name) is spec  # built once
