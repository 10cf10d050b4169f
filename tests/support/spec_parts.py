"""The smallest components that fill a :class:`~dit_lora.contract.spec.FamilySpec`'s four required fields, for tests
that need a family but not a model (the registry, the contract's checks and fallbacks)."""

from __future__ import annotations

from dit_lora.contract.spec import FamilyInfo, FamilySpec


class TinyModel:
    """``model``: nothing to check or load; LoRA on ``to_q``."""

    def validate_config(self, cfg): ...
    def load_components(self, cfg, device): ...
    def lora_targets(self, model, lora): return ["to_q"]


class TinyData:
    """``data``: no handler; the standard data stage."""

    def data_handler(self, cfg, spec): ...
    def build_data(self, cfg, spec, comps, accelerator): return None


class TinyLoss:
    """``loss``: the batch as it is, no loss."""

    def prepare_batch(self, comps, batch, device, cached): return batch
    def compute_loss(self, comps, model, batch, generator, cfg): ...


class TinyAdapter:
    """``adapter``: saves and loads nothing."""

    def save_adapter(self, output_dir, lora_state, lora_config): ...
    def load_pipeline_with_adapter(self, cfg, adapter_dir, device): ...


def tiny_spec(name: str = "tiny", **components) -> FamilySpec:
    """A spec called ``name`` of the tiny required components, ``components`` replacing or adding any field."""
    parts = {"info": FamilyInfo(pipeline_class_name="TinyPipeline"), "model": TinyModel(), "data": TinyData(),
             "loss": TinyLoss(), "adapter": TinyAdapter()}
    return FamilySpec(name=name, **{**parts, **components})
