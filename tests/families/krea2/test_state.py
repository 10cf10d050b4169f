"""Krea2Run: put in place once for hand-built components, no guidance embedding, the pipeline's default taps."""

from __future__ import annotations


def test_run_state_is_put_in_place_once_with_the_pipelines_taps():
    from diffusers import Krea2Pipeline

    from dit_lora.contract.family import Components
    from dit_lora.families.krea2.state import Krea2Run, run_state

    comps = Components(model=None, scheduler=None, encoders={}, state=None)
    state = run_state(comps)
    assert isinstance(state, Krea2Run) and not state.guidance_embeds and run_state(comps) is state
    pipe = Krea2Pipeline(scheduler=None, vae=None, text_encoder=None, tokenizer=None, transformer=None)
    assert state.select_layers == pipe.text_encoder_select_layers
