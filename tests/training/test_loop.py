"""training/loop.py's host-side stages with stand-ins: what follows an update (check window, checkpoints,
validation), the logged window, the stop on a signal (clipping: tests/training/test_engine.py). Whole runs are in tests/e2e/."""

from __future__ import annotations

import contextlib
import math
import time
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch

from dit_lora.core.engine import EngineChoice
from dit_lora.core.errors import Interrupted
from dit_lora.contract.capabilities import Samples
from dit_lora.training import levers, loop
from dit_lora.training.engine import make_engine
from dit_lora.training.run_parts import RunRecord
from dit_lora.config import TrainConfig


class Progress:
    def __init__(self):
        self.updates, self.postfix, self.closed = 0, None, False

    def update(self, n):
        self.updates += n

    def set_postfix(self, postfix):
        self.postfix = postfix

    def close(self):
        self.closed = True


def _reading(loss=0.5, skipped=0, grad_norm=1.25):
    return SimpleNamespace(window_loss=loss, learning_rates=[1e-4], grad_norm=grad_norm, skipped=skipped,
                           nonfinite_losses=skipped, nonfinite_grads=0, loss_spikes=0, window_steps=2)


def _run(tmp_path, *, interval=2, max_steps=6, checkpointing_steps=3, validation_steps=4, validation=True):
    events = []
    accelerator = SimpleNamespace(unwrap_model=lambda m: m, is_main_process=True, autocast=contextlib.nullcontext,
                                  log=lambda values, step: events.append(("log", step, values)),
                                  trackers=[SimpleNamespace(finish=lambda: events.append(("end",)))])
    guard = SimpleNamespace(read=lambda: _reading(), rollbacks=[])
    recovery = SimpleNamespace(at_check=lambda step, reading, model: events.append(("check", step)))
    cfg = TrainConfig(checkpointing_steps=checkpointing_steps, validation_steps=validation_steps, seed=0,
                      ema_validation="trained", validation_prompt="a red square")
    model = torch.nn.Linear(2, 2)
    family = SimpleNamespace(generate=lambda comps, m, cond, cfg, seed: (events.append(("generate", m.training)),
                                                                           ["a", "b"])[1],
                             save_sample=lambda item, path, *cfg: events.append(("sample", Path(path).name)),
                             capabilities=(Samples,), name="stand-in")
    engine = make_engine(EngineChoice("ddp", ()))
    engine.accelerator = accelerator
    run = SimpleNamespace(cfg=cfg, accelerator=accelerator, guard=guard, recovery=recovery,
                          schedule=SimpleNamespace(interval=interval, max_steps=max_steps), state=loop.RunState(),
                          model=model, features=levers.for_run(SimpleNamespace(crash_point=lambda *a: None)),
                          comps=None, engine=engine,
                          optimizer=SimpleNamespace(optimizer="inner"), spec=SimpleNamespace(samples=family, name=family.name),
                          out=tmp_path, data=SimpleNamespace(held_out=None),
                          validation_conds=[("a red square", {"x": 1})] if validation else [],
                          hooks=SimpleNamespace(crash_point=lambda *a: None), log=print,
                          record=RunRecord(started=0.0))
    return run, events


def test_after_update_runs_checks_checkpoints_and_validation_on_schedule(tmp_path, monkeypatch):
    run, events = _run(tmp_path)
    monkeypatch.setattr(loop, "save_run_checkpoint", lambda r: events.append(("checkpoint", r.state.global_step)))
    seen = []
    progress, clock = Progress(), loop._Clock(steps_at_start=0)
    for _ in range(6):
        loop.after_update(run, progress, clock, on_step=lambda step, model, opt: seen.append((step, opt)))
    assert run.state.global_step == 6 and progress.updates == 6 and seen[0] == (1, "inner") and len(seen) == 6
    kinds = [(e[0], e[1]) for e in events if e[0] in ("check", "checkpoint", "log")]
    assert kinds == [("log", 2), ("check", 2), ("checkpoint", 3), ("log", 4), ("check", 4), ("log", 6), ("check", 6),
                     ("checkpoint", 6)]
    # validation at step 4 only (not at the last step: finish draws the final samples), the model back in train mode
    assert [e for e in events if e[0] in ("generate", "sample")] == [("generate", False), ("sample", "step4_0"),
                                                                      ("sample", "step4_1")]
    assert run.model.training and (tmp_path / "samples").is_dir()
    assert clock.steps(run.state) == 6 and clock.last_window is not None


def test_several_prompts_sample_each_with_its_own_prompt_and_seed_and_name_their_files(tmp_path, monkeypatch):
    """Each --validation_prompt's inputs, that prompt alone in the config the family reads, the run's seed plus the
    prompt's position; the files named by prompt (no grid: the stand-in's samples are not images)."""
    run, events = _run(tmp_path, validation_steps=2)
    calls = []
    run.spec.samples.generate = lambda comps, m, cond, cfg, seed: (
        calls.append((cond, cfg.validation.validation_prompt, cfg.validation.prompts, seed)) or ["s"])
    run.validation_conds = [("a cat", {"k": 0}), ("a dog", {"k": 1}), ("a fox", {"k": 2})]
    monkeypatch.setattr(loop, "save_run_checkpoint", lambda r: None)
    for _ in range(2):
        loop.after_update(run, Progress(), loop._Clock(0))
    assert calls == [({"k": 0}, "a cat", ["a cat"], 0), ({"k": 1}, "a dog", ["a dog"], 1),
                     ({"k": 2}, "a fox", ["a fox"], 2)]
    assert [e[1] for e in events if e[0] == "sample"] == ["step2_p0_0", "step2_p1_0", "step2_p2_0"]


def test_after_update_checks_at_the_last_step_off_the_interval(tmp_path, monkeypatch):
    run, events = _run(tmp_path, interval=4, max_steps=5, checkpointing_steps=0, validation=False)
    monkeypatch.setattr(loop, "save_run_checkpoint", lambda r: pytest.fail("checkpointing_steps 0 saves nothing"))
    for _ in range(5):
        loop.after_update(run, Progress(), loop._Clock(0))
    assert [e[1] for e in events if e[0] == "check"] == [4, 5]


def test_the_held_out_loss_comes_before_the_checkpoint_that_keeps_it_and_stays_out_of_the_step_time(tmp_path,
                                                                                                     monkeypatch):
    """Every --validation_steps and at the last step, before that step's checkpoint (which then holds it, so a resume
    from it has the figure); its seconds leave the check window's step time."""
    from dit_lora.training import validation_loss

    run, events = _run(tmp_path, interval=2, max_steps=5, checkpointing_steps=2, validation_steps=2, validation=False)
    run.data = SimpleNamespace(held_out=["a held-out sample"])
    monkeypatch.setattr(loop, "save_run_checkpoint", lambda r: events.append(("checkpoint", r.state.global_step)))
    monkeypatch.setattr(validation_loss, "record",
                        lambda r, progress: events.append(("held-out", r.state.global_step)) or 100.0)
    clock = loop._Clock(0)
    for _ in range(5):
        loop.after_update(run, Progress(), clock)
    assert [e[:2] for e in events if e[0] in ("held-out", "checkpoint")] == [
        ("held-out", 2), ("checkpoint", 2), ("held-out", 4), ("checkpoint", 4), ("held-out", 5)]
    assert clock.window_start > time.perf_counter() + 50  # the evaluations' (stand-in) seconds moved it on


def test_log_window_records_loss_and_skips(tmp_path):
    run, events = _run(tmp_path)
    run.state.global_step = 8
    progress = Progress()
    loop._log_window(run, progress, _reading(loss=0.25, skipped=1), step_time=0.5)
    assert run.state.loss_history == [[8, 0.25]] and run.state.skipped_steps == 1
    assert progress.postfix["loss"] == "0.2500" and progress.postfix["skipped"] == 1
    (_, step, values), = events
    assert step == 8 and values["loss"] == 0.25 and values["grad_norm"] == 1.25 and values["step_time_s"] == 0.5
    events.clear()
    loop._log_window(run, progress, _reading(loss=None, grad_norm=math.inf), step_time=0.5)
    assert progress.postfix["loss"] == "skipped" and "loss" not in events[0][2] and "grad_norm" not in events[0][2]
    assert run.state.loss_history == [[8, 0.25]]


def test_a_plain_line_between_checks_says_which_step_its_loss_was_read_at(tmp_path):
    """Issue 76: a plain line every sixth step showed step 24's loss and grad norm again at step 30, as step 30's."""
    run, _ = _run(tmp_path)
    run.state.global_step = 24
    from dit_lora.core.progress import Progress as Lines

    progress = Lines(60, desc="step", unit="step", bar=False)
    loop._log_window(run, progress, _reading(loss=0.25), step_time=0.5)
    progress.n = 30  # six steps on, before the next check
    line = progress.line()
    assert line.startswith("step 30/60") and ", loss 0.2500, lr " in line and ", grad_norm 1.250, read at step 24, " in line


def test_stop_on_signal_saves_unless_just_saved_and_says_how_to_resume(tmp_path, monkeypatch):
    run, events = _run(tmp_path, checkpointing_steps=3)
    monkeypatch.setattr(loop, "save_run_checkpoint", lambda r: events.append(("checkpoint",)) or tmp_path / "ck-4")
    stop = SimpleNamespace(signum=15, exit_code=143)
    run.state.global_step = 4
    with pytest.raises(Interrupted) as err:
        loop._stop_on_signal(run, Progress(), stop)
    assert ("checkpoint",) in events and ("end",) in events and err.value.exit_code == 143
    assert "after step 4 of 6" in str(err.value) and "ck-4" in str(err.value)
    events.clear()
    run.state.global_step = 3  # after_update saved this one already
    with pytest.raises(Interrupted) as err:
        loop._stop_on_signal(run, Progress(), stop)
    assert ("checkpoint",) not in events and "checkpoint-3" in str(err.value)


def test_validation_samples_keep_the_size_setup_read_when_the_dataset_config_changes_or_goes(tmp_path, monkeypatch):
    """The validation size was read from the dataset config at every validation: an edited file changed it mid-run, a
    deleted one stopped the run at a validation (and at the end, after the adapter was written, losing the samples,
    summary, card and push). It is read once, at setup (RunRecord.sample_sizes)."""
    import yaml

    from dit_lora.config import parse_config
    from dit_lora.data.data_sets import sample_sizes

    path = tmp_path / "sets.yaml"
    path.write_text(yaml.safe_dump({"datasets": [{"train_data_dir": "a", "resolution": 32}]}))
    run, _ = _run(tmp_path, validation_steps=1)
    run.cfg = parse_config(["--pretrained_model_name_or_path", "org/model", "--family", "sana", "--dataset_config",
                            str(path), "--validation_prompt", "a red square"])
    run.spec.video_frames = None
    run.record = RunRecord(started=0.0, sample_sizes=sample_sizes(run.cfg, run.spec)[0])  # as setup reads it
    sizes = []
    run.spec.samples.generate = lambda comps, m, cond, cfg, seed: sizes.append(cfg.data.resolution) or ["s"]
    path.write_text(yaml.safe_dump({"datasets": [{"train_data_dir": "a", "resolution": 512}]}))
    loop._generate(run, run.spec.samples, run.model, 0)
    path.unlink()
    loop._generate(run, run.spec.samples, run.model, 0)
    assert sizes == [32, 32]
