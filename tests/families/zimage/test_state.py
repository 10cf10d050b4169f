"""families/zimage/state.py: ZImageRun in comps.state, made for hand-built components, the tables built once."""

from __future__ import annotations

import torch

from dit_lora.contract.capabilities import HasTextSettings, TextSettings
from dit_lora.contract.family import Components
from dit_lora.families.zimage.state import ZImageRun, run_state, tables
from dit_lora.modeling.flow_matching import training_scheduler


def test_state_is_made_once_and_holds_the_text_settings():
    comps = Components(model=None)
    state = run_state(comps)
    assert isinstance(state, ZImageRun) and run_state(comps) is state and state.flow_tables is None
    assert isinstance(ZImageRun(text=TextSettings(max_sequence_length=64)), HasTextSettings)


def test_tables_are_built_on_first_use_and_kept():
    comps = Components(model=None, scheduler=training_scheduler({"shift": 3.0}))
    sigmas, timesteps = tables(comps, torch.device("cpu"))
    assert torch.equal(sigmas, comps.scheduler.sigmas) and torch.equal(timesteps, comps.scheduler.timesteps)
    assert tables(comps, torch.device("cpu")) is comps.state.flow_tables
