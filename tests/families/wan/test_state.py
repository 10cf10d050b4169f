"""families/wan/state.py: WanRun in comps.state, made for hand-built components with the old defaults."""

from __future__ import annotations

from dit_lora.contract.family import Components
from dit_lora.families.wan.state import WanRun, run_state


def test_run_state_is_made_once_for_components_built_by_hand():
    comps = Components(model=None)
    state = run_state(comps)
    assert isinstance(state, WanRun) and comps.state is state and run_state(comps) is state


def test_an_empty_run_trains_one_transformer_without_image_mode():
    state = WanRun()
    assert state.expert is None and state.trained_experts == ["high"] and state.image_probability == 0.0
    assert not state.expand_timesteps and state.validation_image is None and state.clip_tokens is None
    assert WanRun().trained_experts is not state.trained_experts  # no list shared between runs
