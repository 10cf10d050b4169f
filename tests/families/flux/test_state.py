"""FluxRun: what a FLUX.1 run decides, an empty one put in place for hand-built components."""

from __future__ import annotations


def test_run_state_is_put_in_place_once():
    from dit_lora.contract.family import Components
    from dit_lora.families.flux.state import FluxRun, run_state

    comps = Components(model=None, scheduler=None, encoders={}, state=None)
    state = run_state(comps)
    assert isinstance(state, FluxRun) and state.guidance_embeds and run_state(comps) is state
