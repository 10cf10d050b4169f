"""The required contract of a model family: at most ten methods over the spec's four required components, and an
immutable spec."""

from __future__ import annotations

import dataclasses

import pytest
from spec_parts import tiny_spec

from dit_lora.contract.capabilities import members
from dit_lora.contract.family import Components
from dit_lora.contract.spec import REQUIRED
from dit_lora.registry import available, get_family


def test_the_required_part_is_at_most_ten_methods_and_exactly_the_contract():
    methods = sorted(m for proto in REQUIRED.values() for m in members(proto))
    assert len(methods) <= 10, methods
    assert methods == sorted(["validate_config", "load_components", "lora_targets", "data_handler", "build_data",
                              "prepare_batch", "compute_loss", "save_adapter", "load_pipeline_with_adapter"])


def test_a_spec_is_immutable_after_construction():
    spec = tiny_spec("tiny_spec")
    with pytest.raises(dataclasses.FrozenInstanceError):
        spec.fps = 16
    with pytest.raises(dataclasses.FrozenInstanceError):
        spec.name = "changed"
    with pytest.raises(dataclasses.FrozenInstanceError):
        del spec.name
    assert spec.name == "tiny_spec" and not hasattr(spec, "fps")


def test_what_a_run_decides_has_one_place_its_typed_state():
    comps = Components(model=None)
    assert comps.state is None and not hasattr(comps, "extras")


@pytest.mark.parametrize("name", available())
def test_every_registered_family_is_immutable(name):
    family = get_family(name)
    # a converted family is a FamilySpec, a frozen dataclass: "cannot assign to field"
    with pytest.raises(AttributeError, match="immutable|cannot assign"):
        family.anything = 1


@pytest.mark.slow
def test_a_tiny_training_run_leaves_no_state_on_the_family(tiny_sana, shapes_data, tmp_path, monkeypatch):
    """Every stage of a run (setup, data, validation, export, card) keeps what it decides off the spec."""
    from helpers import train_in_process

    from dit_lora.contract.spec import COMPONENTS
    from dit_lora.registry import get_spec
    from dit_lora.setup import resolve as resolve_module

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
