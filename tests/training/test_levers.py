"""training/levers.py: each lever as a feature does at its hooks what the step did by name before."""

from __future__ import annotations

import contextlib
from types import SimpleNamespace

import torch

from dit_lora.training import levers
from dit_lora.training.compile import CompileCounters
from dit_lora.training.features import StepContext


def test_a_run_holds_every_lever_in_install_and_call_order():
    features = levers.for_run(SimpleNamespace())
    assert [type(f).__name__ for f in features] == ["Drills", "DataSets", "KernelChecks", "Compile", "BlockSwap",
                                                     "ActivationOffload", "EMA"]
    assert [f.stage for f in features if f.stage != "model"] == ["kernels", "kernels", "restore"]
    assert levers.ema_of(features) is None and levers.compile_summary(features) is None


class _Runtime:
    def __init__(self, failing=False):
        self.events, self.failing = [], failing

    def due(self, step):
        return step % 2 == 1

    def arm(self, step):
        self.events.append(("arm", step))

    def finish_check(self, step):
        self.events.append(("check", step))
        return self.failing

    def state_dict(self):
        return {"checks": 3}


def test_the_kernel_check_arms_at_an_update_s_first_micro_batch_and_may_veto_it():
    checks = levers.KernelChecks()
    checks.runtime = _Runtime(failing=True)
    run = SimpleNamespace(update=SimpleNamespace(veto=False))
    later = StepContext(step=1, first=False, batch={})  # a due step, but not its first micro-batch
    checks.before_step(run, later)
    checks.after_backward(run, later)
    assert not later.checking and checks.runtime.events == [] and not run.update.veto
    first = StepContext(step=1, first=True, batch={})
    checks.before_step(run, first)
    checks.after_backward(run, first)
    assert first.checking and checks.runtime.events == [("arm", 1), ("check", 1)] and run.update.veto
    off_schedule = StepContext(step=2, first=True, batch={})
    checks.before_step(run, off_schedule)
    assert not off_schedule.checking
    assert checks.key == "kernels" and checks.state_dict() == {"checks": 3}


def test_compile_keys_the_batch_shape_only_when_compiling_and_runs_a_check_step_eagerly():
    feature = levers.Compile()
    feature.counters = CompileCounters(mode="off")
    ctx = StepContext(step=1, first=True, batch={"x": torch.zeros(2, 3)}, checking=True)
    with feature.around_forward(None, ctx):
        pass
    assert ctx.shape is None and feature.summary() is None
    feature.counters = CompileCounters(mode="blocks")
    with feature.around_forward(None, ctx):
        pass
    assert ctx.shape == (("x", (2, 3), "torch.float32"),)
    feature.before_step(None, ctx)
    feature.after_step(None, ctx)  # a check step ran eagerly: its shape is seen, not warm
    assert feature.counters.seen == {ctx.shape} and feature.counters.warm == set()
    assert feature.summary()["mode"] == "blocks"


def test_the_drills_leave_a_step_alone_without_a_drill():
    audit_events = []

    @contextlib.contextmanager
    def step():
        audit_events.append("step")
        yield

    hooks = SimpleNamespace(injector=None, sync_audit=SimpleNamespace(step=step), crash_point=lambda *a: None)
    drills = levers.Drills(hooks)
    loss = torch.tensor(1.0)
    ctx = StepContext(step=1, first=True, batch={})
    with drills.around_step(None, ctx), drills.around_forward(None, ctx):
        assert drills.after_loss(None, ctx, loss) is loss
    assert audit_events == ["step"]


def test_the_ema_follows_the_guard_s_flag_and_writes_its_file(tmp_path):
    feature = levers.EMA()
    run = SimpleNamespace(guard=SimpleNamespace(last_flag=torch.tensor(0.0)))
    feature.after_update(run, StepContext(step=1, first=True, batch={}))  # no --use_ema: nothing
    assert not feature.writes_files()
    seen = []
    feature.ema = SimpleNamespace(update=seen.append, write=lambda folder: (folder / "ema").write_text("x"))
    feature.after_update(run, StepContext(step=1, first=True, batch={}))
    assert seen == [run.guard.last_flag] and feature.writes_files()
    feature.write_files(tmp_path)
    assert (tmp_path / "ema").is_file()


def test_the_class_images_loss_is_added_with_its_weight_and_counted():
    """Prior preservation's loss, diffusers' DreamBooth formula: the instance loss plus --prior_loss_weight times the
    family's loss on the class images (the step's generator, under autocast), one backward; each set counted."""
    from dit_lora.data.batches import PRIOR
    from dit_lora.data.data_sets import SetMix

    seen = []

    def compute_loss(comps, model, batch, generator, cfg):
        seen.append((batch, generator))
        return torch.tensor(3.0)

    sets = SetMix(("mine", "class"), None, (2.0, 1.0), (0, 0, 1, 1), (False, True), prior_loss_weight=0.25)
    run = SimpleNamespace(
        data=SimpleNamespace(sets=sets), spec=SimpleNamespace(loss=SimpleNamespace(compute_loss=compute_loss)),
        accelerator=SimpleNamespace(autocast=contextlib.nullcontext), comps="comps", model="model", cfg="cfg",
        update=SimpleNamespace(generator="gen"),
    )
    feature = levers.DataSets()
    raw = {"sample_index": [1], PRIOR: {"sample_index": [3]}}
    ctx = StepContext(step=1, first=True, batch=raw)
    feature.before_step(run, ctx)
    assert ctx.loss_factor == 2.0 and feature.batches == [1, 1]
    ctx.batch = {"sample_index": [1], PRIOR: "prepared class batch"}
    loss = feature.after_loss(run, ctx, torch.tensor(1.0))
    assert loss.item() == 1.0 and seen == [("prepared class batch", "gen")]
    # the set's loss weight scales the instance loss only; --prior_loss_weight is the class loss's whole weight
    assert ctx.backward_loss(loss).item() == 2.0 * 1.0 + 0.25 * 3.0
    assert ctx.logged_loss(loss).item() == 1.0 + 0.25 * 3.0
    plain = StepContext(step=1, first=True, batch={"sample_index": [0]})
    assert feature.after_loss(run, plain, torch.tensor(1.0)).item() == 1.0 and plain.added_loss is None
    assert feature.state_dict() == {"batches": [1, 1]}
