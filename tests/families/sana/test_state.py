"""families/sana/state.py: SanaRun in comps.state, made for hand-built components, the tables built once."""

from __future__ import annotations

import torch

from dit_lora.contract.capabilities import HasTextSettings, TextSettings
from dit_lora.contract.family import Components
from dit_lora.families.sana.state import SanaRun, run_state, tables
from dit_lora.modeling.flow_matching import training_scheduler


def test_run_state_is_made_once_for_components_built_by_hand():
    comps = Components(model=None)
    state = run_state(comps)
    assert isinstance(state, SanaRun) and comps.state is state and run_state(comps) is state
    assert state.text is None and state.text_tokens is None and state.flow_tables is None


def test_it_holds_the_text_settings_the_caption_report_reads():
    state = SanaRun(text=TextSettings(max_sequence_length=120))
    assert isinstance(state, HasTextSettings) and state.text.max_sequence_length == 120


def test_tables_are_built_on_first_use_and_kept():
    comps = Components(model=None, scheduler=training_scheduler({"shift": 3.0}))
    sigmas, timesteps = tables(comps, torch.device("cpu"))
    assert torch.equal(sigmas, comps.scheduler.sigmas) and torch.equal(timesteps, comps.scheduler.timesteps)
    assert tables(comps, torch.device("cpu")) is comps.state.flow_tables
