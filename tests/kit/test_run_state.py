"""kit/run_state.py: a family's run state put into hand-built components once, and a flow family's
tables built once on the asked device."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import pytest
import torch

from dit_lora.contract.family import Components
from dit_lora.families.sana.state import SanaRun, run_state, tables
from dit_lora.kit.run_state import FamilyRun, FlowRun
from dit_lora.modeling.flow_matching import training_scheduler


@dataclass
class Own(FamilyRun):
    value: int = 0
    loaded_by: ClassVar[str] = "the Own components' loading sets it"


def test_the_state_is_put_there_once_and_kept():
    comps = Components(model=None)
    state = Own.of(comps)
    assert isinstance(state, Own) and comps.state is state and Own.of(comps) is state
    assert run_state(Components(model=None, state=SanaRun(text_tokens=3))).text_tokens == 3


def test_a_flow_familys_tables_are_built_on_the_device_once():
    comps = Components(model=None, scheduler=training_scheduler({"shift": 3.0, "num_train_timesteps": 1000}))
    sigmas, timesteps = tables(comps, torch.device("cpu"))
    assert isinstance(comps.state, SanaRun) and isinstance(comps.state, FlowRun)
    assert comps.state.flow_tables[0] is sigmas and tables(comps, torch.device("cpu"))[1] is timesteps


def test_an_epsilon_familys_state_reads_the_output_layout_and_keeps_the_epsilon_half():
    """A learned sigma (``out_channels == 2 * in_channels``): the first ``in_channels`` of the output are the noise,
    as DiTPipeline and PixArtAlphaPipeline split it; without one the output is the noise as it is."""
    from types import SimpleNamespace

    from dit_lora.kit.run_state import EpsilonRun, output_layout

    sigma = output_layout(SimpleNamespace(config=SimpleNamespace(in_channels=4, out_channels=8)))
    assert sigma == {"learned_sigma": True, "in_channels": 4}
    assert output_layout(SimpleNamespace(config=SimpleNamespace(in_channels=4, out_channels=4)))["learned_sigma"] is False
    pred = torch.arange(16.0).reshape(1, 8, 2, 1)
    assert torch.equal(EpsilonRun(**sigma).epsilon(pred), pred[:, :4])
    assert EpsilonRun().epsilon(pred) is pred


def test_a_part_loading_sets_is_refused_by_its_name_and_who_sets_it():
    assert Own.required(3, "value") == 3
    with pytest.raises(ValueError, match=r"^comps.state.value is not set: the Own components' loading sets it$"):
        Own.required(None, "value")
