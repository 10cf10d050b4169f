"""families/sanavideo/state.py: the run state is put in place for hand-built components, and a part loading sets
is refused by its name when missing."""

from __future__ import annotations

import pytest

from dit_lora.contract.family import Components
from dit_lora.families.sanavideo.state import SanaVideoRun, required, run_state


def test_run_state_and_required():
    comps = Components(model=None, scheduler=None, encoders={}, state=None)
    state = run_state(comps)
    assert isinstance(state, SanaVideoRun) and comps.state is state and run_state(comps) is state
    with pytest.raises(ValueError, match="comps.state.flow_tables is not set"):
        required(state.flow_tables, "flow_tables")
    assert required(3.0, "flow_shift") == 3.0
