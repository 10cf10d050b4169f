"""families/qwenimage/state.py: the run state put in place for hand-built components."""

from __future__ import annotations

from dit_lora.contract.family import Components
from dit_lora.families.qwenimage.state import QwenImageRun, run_state


def test_run_state_is_created_once():
    comps = Components(model=None)
    state = run_state(comps)
    assert isinstance(state, QwenImageRun) and run_state(comps) is state and state.text_tokens is None
