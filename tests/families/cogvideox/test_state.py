"""families/cogvideox/state.py: a run's decisions in a typed CogVideoXRun, created for hand-built components."""

from __future__ import annotations

from dit_lora.contract.family import Components
from dit_lora.families.cogvideox.state import CogVideoXRun, run_state


def test_run_state_puts_an_empty_run_into_hand_built_components_once():
    comps = Components(model=None)
    state = run_state(comps)
    assert isinstance(state, CogVideoXRun) and comps.state is state and run_state(comps) is state
    assert state.rotary_cache == {} and state.validation_image is None and state.max_sequence_length is None
    assert CogVideoXRun().rotary_cache is not CogVideoXRun().rotary_cache  # no cache shared between runs
