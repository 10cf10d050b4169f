"""families/flux2/state.py: the run state and its default for components built by hand."""

from __future__ import annotations

from dit_lora.contract.family import Components
from dit_lora.families.flux2.state import DEV_PIPELINE, Flux2Run, run_state


def test_run_state_is_put_there_once():
    comps = Components(model=None, scheduler=None)
    state = run_state(comps)
    assert isinstance(state, Flux2Run) and comps.state is state and run_state(comps) is state
    assert state.pipeline_class == DEV_PIPELINE and state.guidance_embeds and state.out_layers == (10, 20, 30)
