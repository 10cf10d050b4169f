"""families/hunyuanvideo15/state.py: the run state components built by hand get, and the refusal of a missing part."""

from __future__ import annotations

import pytest

from dit_lora.contract.family import Components
from dit_lora.families.hunyuanvideo15.state import HunyuanVideo15Run, required, run_state


def test_a_hand_built_components_gets_an_empty_state_and_a_missing_part_is_named():
    comps = Components(model=None, scheduler=None, encoders={})
    state = run_state(comps)
    assert isinstance(state, HunyuanVideo15Run) and state.scaling_factor is None
    with pytest.raises(Exception, match="scaling_factor"):
        required(state.scaling_factor, "scaling_factor")
