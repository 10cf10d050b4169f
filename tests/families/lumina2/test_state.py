"""Lumina2Run: what a Lumina 2 run decides, an empty one put in place for hand-built components, with no trimmed
caption length until the data stage measures it."""

from __future__ import annotations


def test_run_state_is_put_in_place_once():
    from dit_lora.contract.family import Components
    from dit_lora.families.lumina2.state import Lumina2Run, run_state

    comps = Components(model=None, scheduler=None, encoders={}, state=None)
    state = run_state(comps)
    assert isinstance(state, Lumina2Run) and state.text_tokens is None and run_state(comps) is state
