"""families/dit/state.py: DiTRun in comps.state, made for hand-built components."""

from __future__ import annotations

import pytest

from dit_lora.contract.family import Components
from dit_lora.families.dit.embedding import DEFAULT_CLASS_DROPOUT
from dit_lora.families.dit.state import DiTRun, run_state


def test_run_state_is_made_once_for_components_built_by_hand():
    comps = Components(model=None)
    state = run_state(comps)
    assert isinstance(state, DiTRun) and comps.state is state and run_state(comps) is state
    assert state.label2id is None and state.classes is None and state.null_class is None
    assert state.class_dropout_prob == DEFAULT_CLASS_DROPOUT and not state.learned_sigma


def test_a_state_already_there_is_kept():
    mine = DiTRun(null_class=3)
    assert run_state(Components(model=None, state=mine)) is mine


def test_the_null_id_of_a_state_without_one_is_refused_in_words():
    assert DiTRun(null_class=3).null_id() == 3
    with pytest.raises(ValueError, match="null_class is not set: DiTModel.build_components sets it"):
        DiTRun().null_id()  # a hand-built state: no None reaches torch.full_like in the loss
