"""families/ltx2/state.py: a part loading sets is refused by its name when components were built without it."""

from __future__ import annotations

import pytest

from dit_lora.contract.family import Components
from dit_lora.families.ltx2.state import LTX2Run, required, run_state


def test_a_missing_part_names_what_sets_it():
    comps = Components(model=None, scheduler=None, encoders={}, state=None)
    state = run_state(comps)
    assert isinstance(state, LTX2Run) and comps.state is state and state.with_audio
    with pytest.raises(ValueError, match=r"comps.state.audio is not set: the LTX-2 components' loading sets it"):
        required(state.audio, "audio")
