"""training/features.py: the one list of a run's levers and the order it calls their hooks in."""

from __future__ import annotations

import contextlib

import pytest
import torch

from dit_lora.training.features import STAGES, Feature, Features, StepContext


class Recorder(Feature):
    """A feature that notes every hook it is called at."""

    def __init__(self, name: str, events: list, *, stage: str = "model", key: str | None = None, files=False):
        self.name, self.events, self.files = name, events, files
        self.stage = stage  # type: ignore[misc]  # the class attribute, per instance for the test
        self.key = key  # type: ignore[misc]
        self.loaded = None

    def _note(self, hook):
        self.events.append((self.name, hook))

    def install(self, run):
        self._note("install")

    def before_step(self, run, ctx):
        self._note("before_step")

    @contextlib.contextmanager
    def _around(self, hook):
        self._note(f"enter {hook}")
        yield
        self._note(f"exit {hook}")

    def around_step(self, run, ctx):
        return self._around("step")

    def around_forward(self, run, ctx):
        return self._around("forward")

    def after_loss(self, run, ctx, loss):
        self._note("after_loss")
        return loss * 2

    def after_update(self, run, ctx):
        self._note("after_update")

    def state_dict(self):
        return {"of": self.name}

    def load_state_dict(self, state):
        self.loaded = state

    def writes_files(self):
        return self.files

    def write_files(self, folder):
        (folder / self.name).write_text("x")


def test_the_hooks_run_in_list_order_and_contexts_nest_in_it():
    events: list = []
    features = Features([Recorder("a", events), Recorder("b", events)])
    ctx = StepContext(step=1, first=True, batch={})
    features.before_step(None, ctx)
    with features.around_step(None, ctx), features.around_forward(None, ctx):
        loss = features.after_loss(None, ctx, torch.tensor(1.0))
    features.after_update(None, ctx)
    assert loss.item() == 4.0  # each feature's after_loss takes the one before it's
    assert events == [
        ("a", "before_step"), ("b", "before_step"),
        ("a", "enter step"), ("b", "enter step"), ("a", "enter forward"), ("b", "enter forward"),
        ("a", "after_loss"), ("b", "after_loss"),
        ("b", "exit forward"), ("a", "exit forward"), ("b", "exit step"), ("a", "exit step"),
        ("a", "after_update"), ("b", "after_update"),
    ]


def test_a_feature_is_installed_at_its_stage_only():
    events: list = []
    features = Features([Recorder("k", events, stage="kernels"), Recorder("m", events), Recorder("r", events,
                                                                                                stage="restore")])
    for stage in STAGES:
        features.install(None, stage)
    assert events == [("k", "install"), ("m", "install"), ("r", "install")]
    with pytest.raises(AssertionError):
        features.install(None, "no such stage")


def test_checkpoint_state_goes_under_each_feature_s_key(tmp_path):
    events: list = []
    keyed, plain = Recorder("kernels", events, key="kernels", files=True), Recorder("plain", events)
    features = Features([keyed, plain])
    assert features.state_dict() == {"kernels": {"of": "kernels"}}
    features.load_state_dict({"run": {}, "kernels": {"saved": 1}})
    assert keyed.loaded == {"saved": 1} and plain.loaded is None
    writer = features.file_writer()
    assert writer is not None
    writer(tmp_path)
    assert [p.name for p in tmp_path.iterdir()] == ["kernels"]
    assert Features([plain]).file_writer() is None  # no part of the save is added when no feature writes files
    assert features.find(Recorder) is keyed


def test_a_feature_without_hooks_changes_nothing():
    features = Features([Feature()])
    ctx = StepContext(step=3, first=False, batch={"x": 1})
    loss = torch.tensor(2.0)
    with features.around_step(None, ctx), features.around_transfer(None, ctx), features.around_forward(None, ctx):
        assert features.after_loss(None, ctx, loss) is loss
    features.after_backward(None, ctx)
    features.after_step(None, ctx)
    with features.outside_step():
        pass
    assert features.state_dict() == {} and not ctx.checking and ctx.shape is None
