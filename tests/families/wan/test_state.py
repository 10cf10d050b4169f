"""families/wan/state.py: WanRun in comps.state, made for hand-built components with the old defaults."""

from __future__ import annotations

import pytest

from dit_lora.contract.family import Components
from dit_lora.families.wan.state import WanRun, required, run_state


def test_run_state_is_made_once_for_components_built_by_hand():
    comps = Components(model=None)
    state = run_state(comps)
    assert isinstance(state, WanRun) and comps.state is state and run_state(comps) is state


def test_an_empty_run_trains_one_transformer_without_image_mode():
    state = WanRun()
    assert state.expert is None and state.trained_experts == ["high"] and state.image_probability == 0.0
    assert not state.expand_timesteps and state.validation_image is None and state.clip_tokens is None
    assert WanRun().trained_experts is not state.trained_experts  # no list shared between runs


def test_a_part_the_loading_sets_is_refused_by_name_when_missing():
    state = WanRun(flow_shift=5.0)
    assert required(state.flow_shift, "flow_shift") == 5.0
    with pytest.raises(ValueError, match=r"comps.state.flow_tables is not set: the Wan components' loading sets it"):
        required(state.flow_tables, "flow_tables")
