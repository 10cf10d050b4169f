"""Ideogram4Run: put in place once for hand-built components, no guidance embedding, no unconditional transformer
until a run that draws samples reads one."""

from __future__ import annotations

import pytest


def test_run_state_is_put_in_place_once_and_names_what_loading_sets():
    from dit_lora.contract.family import Components
    from dit_lora.families.ideogram4.state import Ideogram4Run, run_state

    comps = Components(model=None, scheduler=None, encoders={}, state=None)
    state = run_state(comps)
    assert isinstance(state, Ideogram4Run) and not state.guidance_embeds and run_state(comps) is state
    with pytest.raises(ValueError, match="comps.state.unconditional is not set"):
        Ideogram4Run.required(state.unconditional, "unconditional")
