"""ChromaRun: what a Chroma run decides, an empty one put in place for hand-built components, without a guidance
embedding."""

from __future__ import annotations


def test_run_state_is_put_in_place_once_without_a_guidance_embedding():
    from dit_lora.contract.family import Components
    from dit_lora.families.chroma.state import ChromaRun, run_state

    comps = Components(model=None, scheduler=None, encoders={}, state=None)
    state = run_state(comps)
    assert isinstance(state, ChromaRun) and not state.guidance_embeds and run_state(comps) is state
