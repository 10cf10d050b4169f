"""The required contract of a model family: at most ten methods, and an immutable spec."""

from __future__ import annotations

import inspect

import pytest

from dit_lora.registry import available, get_family
from dit_lora.contract.family import REQUIRED, ModelFamily


def _methods(cls) -> list[str]:
    """Public methods and properties a class itself declares (not inherited from ``object``)."""
    return sorted(n for n, v in vars(cls).items()
                  if not n.startswith("_") and (inspect.isfunction(v) or isinstance(v, (property, staticmethod))))


def test_the_required_part_is_at_most_ten_methods_and_exactly_the_contract():
    methods = _methods(ModelFamily)
    assert len(methods) <= 10, methods
    assert sorted(REQUIRED) == methods


class _Tiny(ModelFamily):
    name = "tiny_spec"

    def __init__(self) -> None:
        self.label = "set in __init__ is fine"

    def validate_config(self, cfg): ...
    def load_components(self, cfg, device): ...
    def data_handler(self, cfg): ...
    def compute_loss(self, comps, model, batch, generator, cfg): ...
    def save_adapter(self, output_dir, lora_state, lora_config): ...
    def load_pipeline_with_adapter(self, cfg, adapter_dir, device): ...


def test_a_spec_is_immutable_after_construction():
    family = _Tiny()
    assert family.label == "set in __init__ is fine"
    with pytest.raises(AttributeError, match="immutable"):
        family.fps = 16
    with pytest.raises(AttributeError, match="immutable"):
        family.label = "changed"
    with pytest.raises(AttributeError, match="immutable"):
        del family.label
    assert family.label == "set in __init__ is fine" and "fps" not in vars(family)


@pytest.mark.parametrize("name", available())
def test_every_registered_family_is_immutable(name):
    family = get_family(name)
    # a converted family is a FamilySpec, a frozen dataclass: "cannot assign to field"
    with pytest.raises(AttributeError, match="immutable|cannot assign"):
        family.anything = 1


@pytest.mark.slow
def test_a_tiny_training_run_leaves_no_state_on_the_family(tiny_sana, shapes_data, tmp_path, monkeypatch):
    """Every stage of a run (setup, data, validation, export, card) keeps what it decides off the spec."""
    from dit_lora.contract.spec import COMPONENTS
    from dit_lora.setup import resolve as resolve_module
    from dit_lora.registry import get_spec
    from helpers import train_in_process

    made: list[tuple[object, dict]] = []

    def recording(name):
        # Sana is a FamilySpec (frozen): what could hold run state is its components, each recorded as built
        spec = get_spec(name)
        for part in filter(None, (getattr(spec, field) for field in COMPONENTS)):
            made.append((part, dict(vars(part)) if hasattr(part, "__dict__") else {}))
        return spec

    monkeypatch.setattr(resolve_module, "get_spec", recording)
    summary, out = train_in_process(tiny_sana, shapes_data, tmp_path, max_train_steps=2, checkpointing_steps=0,
                                    validation_prompt="a red circle", validation_steps=1, num_validation_images=1,
                                    validation_inference_steps=2)
    assert isinstance(summary, dict), summary
    assert made and (out / "samples").is_dir()
    for part, at_construction in made:
        assert (dict(vars(part)) if hasattr(part, "__dict__") else {}) == at_construction, type(part).__name__
