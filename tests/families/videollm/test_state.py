"""families/videollm/state.py: a run's decisions in its typed VideoLLMState (the loss, the validation clip), and
the loss that reads them."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import pytest
import torch

from dit_lora.config import TrainConfig
from dit_lora.contract.family import Components
from dit_lora.families.videollm import liger
from dit_lora.families.videollm.state import (
    VideoLLMLoss,
    VideoLLMSetup,
    VideoLLMState,
    run_processing,
    run_state,
)
from dit_lora.registry import get_family


def config(**kw) -> TrainConfig:
    return TrainConfig.for_family(family="llava_next_video", **kw)


def _comps(model=None) -> Components:
    if model is None:
        model = torch.nn.Linear(1, 1)
        model.config = SimpleNamespace(model_type="mistral")
    return Components(model=model, state=VideoLLMState("processing"))


def test_the_setup_chooses_the_plain_loss_where_liger_cannot_run(capsys):
    setup = get_family("llava_next_video").setup
    comps = _comps()
    setup.configure(comps, config())
    assert comps.state.loss_fn is liger.plain_loss and capsys.readouterr().out == ""
    comps = _comps()
    setup.configure(comps, config(use_liger_kernel=True))  # a CPU: a note, then the plain path
    assert comps.state.loss_fn is liger.plain_loss and "plain PyTorch path" in capsys.readouterr().out


def test_the_planners_components_get_the_note_and_keep_nothing(capsys):
    model = torch.nn.Linear(1, 1)
    model.config = SimpleNamespace(model_type="mistral")
    comps = Components(model=model)  # what VideoLLMPlan.plan_components builds: no run state
    get_family("qwen2_5_vl").setup.configure(comps, config(use_liger_kernel=True))
    assert comps.state is None and "plain PyTorch path" in capsys.readouterr().out


def test_the_validation_clip_is_the_option_else_the_first_screened_clip(tmp_path):
    setup = VideoLLMSetup(get_family("llava_next_video").model.arch)
    samples = [SimpleNamespace(video=tmp_path / "a.mp4"), SimpleNamespace(video=tmp_path / "b.mp4")]
    comps = _comps()
    setup.inspect_samples(comps, config(), [])
    assert comps.state.validation_video is None  # nothing screened: nothing chosen
    setup.inspect_samples(comps, config(), samples)
    assert comps.state.validation_video == tmp_path / "a.mp4"
    setup.inspect_samples(comps, config(validation_video=str(tmp_path / "v.mp4")), samples)
    assert comps.state.validation_video == Path(tmp_path / "v.mp4")


def test_run_state_is_none_for_components_built_by_hand():
    assert run_state(Components(model=None)) is None and run_state(SimpleNamespace()) is None
    comps = _comps()
    assert run_state(comps) is comps.state


def test_the_processing_is_the_run_states_and_components_without_one_are_refused_by_name():
    assert run_processing(_comps()) == "processing"
    with pytest.raises(ValueError, match=r"no video-LLM run state \(comps.state\)"):
        run_processing(Components(model=None))


def test_the_loss_reads_the_runs_loss_function_and_drops_what_the_model_does_not_take():
    arch = SimpleNamespace(step_inputs=lambda inputs, config: {**inputs, "stepped": True})
    seen = []

    def loss_fn(spec, model, inputs, labels):
        seen.append((spec, sorted(inputs), labels))
        return torch.tensor(1.5)

    comps = _comps(SimpleNamespace(config="cfg"))
    comps.state.loss_fn = loss_fn
    loss = VideoLLMLoss(arch)
    batch = loss.prepare_batch(comps, {"input_ids": torch.ones(1, 2), "labels": "L", "sample_index": [0]},
                               torch.device("cpu"), cached=False)
    assert loss.compute_loss(comps, "model", batch, torch.Generator(), config()) == 1.5
    assert seen == [(arch, ["input_ids", "stepped"], "L")]
