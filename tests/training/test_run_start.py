"""training/run_start.py: the memory gate (a narrow fit logged with the card and the margin, one FSDP2 rank's share
planned), the engine and the folders judged once per run, and the start notes."""

from __future__ import annotations

import pytest
import torch

from dit_lora.core.errors import UserError


def _cfg(out, **overrides):
    from dit_lora.config import TrainConfig

    return TrainConfig(family="sana", pretrained_model_name_or_path="m", output_dir=str(out), **overrides)


def test_the_memory_gate_logs_a_narrow_fit_with_the_card_and_the_margin(monkeypatch):
    """A run whose prediction is under the device's memory but inside the plan's error starts, and its log says so:
    the card by name, "fits, narrowly", the margin kept and the flags that keep it; one that fits with it says
    nothing more than the plan's line."""
    from types import SimpleNamespace

    from dit_lora.plan import ladder, report
    from dit_lora.plan.estimate import Plan
    from dit_lora.plan.tracing import StepTrace
    from dit_lora.training import run_start as run_module

    plan = Plan(model="m", family="sana", catalogue_entry=None, device="cuda", num_processes=1, train_batch_size=1,
                gradient_accumulation_steps=1, depth=2, weights={"model": 6 * 2**30}, trained_component="model",
                trainable_params=1, optimizer_bytes=0, snapshot_bytes=0, ddp_bytes=0, cache_phase_bytes=None,
                encoders_in_training=False, process_bytes=0, checkpointing=False,
                steps=[StepTrace("b", False, 4 * 2**30, 1), StepTrace("b", True, 2**30, 2)])  # 10 GiB, 7 with ckpt
    monkeypatch.setattr(run_module, "make_plan", lambda *args, **kwargs: plan)
    monkeypatch.setattr(report, "device_name", lambda device: "this NVIDIA GeForce RTX 2080 Ti (cuda:0)")
    accelerator = SimpleNamespace(device=torch.device("cpu"), num_processes=1)
    args = (_cfg("out"), None, accelerator, SimpleNamespace(entry=None))
    for capacity, narrow in ((11 * 2**30, True), (12 * 2**30, False)):
        monkeypatch.setattr(report, "device_memory", lambda device, capacity=capacity: capacity)
        lines: list[str] = []
        assert run_module._memory_plan(*args, lines.append) is plan
        assert len(lines) == (2 if narrow else 1) and lines[0].startswith("memory plan: predicted peak 10.00 GiB")
    assert lines[0].endswith("(`dit-lora plan` for the details)")
    monkeypatch.setattr(report, "device_memory", lambda device: 11 * 2**30)
    lines = []
    run_module._memory_plan(*args, lines.append)
    assert lines[1].startswith("memory plan on this NVIDIA GeForce RTX 2080 Ti (cuda:0): fits, narrowly: 10.00 GiB")
    assert f"inside the {ladder.GPU_ERROR:.0%}" in lines[1] and "--gradient_checkpointing true" in lines[1]


def test_the_memory_gate_plans_one_rank_of_an_fsdp2_run(monkeypatch):
    """Under FSDP2 the gate asks the plan for one rank's share (engine="fsdp2") and stops on it as under DDP; the
    log line says the prediction is sharded."""
    from types import SimpleNamespace

    from dit_lora.core.engine import EngineChoice
    from dit_lora.plan import report
    from dit_lora.training import run_start as run_module
    from dit_lora.training.engine import make_engine

    asked: list[str] = []

    def fake_plan(*args, engine="ddp", **kwargs):
        asked.append(engine)
        # the whole model on one process does not fit; its share over two does
        return SimpleNamespace(peak_memory_bytes=(1 << 30) if engine == "ddp" else (1 << 19),
                               flops_per_update=lambda: 1e12)

    monkeypatch.setattr(run_module, "make_plan", fake_plan)
    monkeypatch.setattr(report, "device_memory", lambda device: 1 << 20)  # a 1 MiB device

    def check_fits(plan, capacity, where):  # the gate's decision alone (its paragraph needs a whole plan)
        if plan.peak_memory_bytes > capacity:
            raise UserError("would not fit")

    monkeypatch.setattr(report, "check_fits", check_fits)
    accelerator = SimpleNamespace(device=torch.device("cpu"), num_processes=2)
    args = (_cfg("out"), None, accelerator, SimpleNamespace(entry=None))
    with pytest.raises(UserError, match="would not fit"):
        run_module._memory_plan(*args, lambda line: None)
    lines: list[str] = []
    fsdp2 = make_engine(EngineChoice("fsdp2", ()))
    assert run_module._memory_plan(*args, lines.append, engine=fsdp2).peak_memory_bytes == 1 << 19
    assert asked == ["ddp", "fsdp2"]
    assert "per process (FSDP2, sharded over 2)" in lines[-1]


class _Stop(Exception):
    pass


def _count_checks(monkeypatch, resolved_out=None):
    """Count the engine and folder checks of a setup stopped right after the accelerator is built; ``resolved_out``:
    the --output_dir the (stand-in) resolution chooses, else the config's own."""
    from dataclasses import replace

    from dit_lora.core.engine import EngineChoice
    from dit_lora.setup.resolve import Resolved
    from dit_lora.training import run_start as run_module

    calls: list[str] = []
    monkeypatch.setattr(run_module, "decide_engine", lambda: calls.append("engine") or EngineChoice("ddp", ()))
    monkeypatch.setattr(run_module, "check_run_folders", lambda cfg: calls.append(f"folders {cfg.training.output_dir}"))
    monkeypatch.setattr(run_module, "resolve", lambda cfg: Resolved(
        replace(cfg, output_dir=resolved_out) if resolved_out else cfg, None, None))

    def stop(*args):
        raise _Stop

    monkeypatch.setattr(run_module, "check_launch_precision", stop)  # the first check after the accelerator
    return run_module, calls


def test_setup_judges_the_engine_and_the_folders_once(monkeypatch, tmp_path):
    """The entry points resolve with resolve_for_training (engine and folders judged before the demo is built); setup
    then judges neither again (it used to: each ran twice). A config resolved without them is judged once, in setup."""
    from accelerate.state import AcceleratorState

    from dit_lora.setup.resolve import Resolved
    from dit_lora.training.run import setup

    run_module, calls = _count_checks(monkeypatch)
    out = tmp_path / "out"
    # setup builds an Accelerator: from a fresh state, whatever an earlier test of the session left (its precision)
    AcceleratorState._reset_state(True)
    try:
        with pytest.raises(_Stop):
            setup(run_module.resolve_for_training(_cfg(out)))
        assert calls == ["engine", f"folders {out}"]
        calls.clear()
        with pytest.raises(_Stop):  # a config built in code: resolved (and judged) inside setup
            setup(_cfg(out))
        assert calls == ["engine", f"folders {out}"]
        calls.clear()
        with pytest.raises(_Stop):  # resolved another way: judged in setup, once
            setup(Resolved(_cfg(out), None, None))
        assert calls == ["engine", f"folders {out}"]
    finally:
        AcceleratorState._reset_state(True)


def test_folders_the_resolution_changed_are_judged_again(monkeypatch, tmp_path):
    """Resolving may change what the folder check reads (a demo, the defaults): those are judged too, once."""
    run_module, calls = _count_checks(monkeypatch, resolved_out=str(tmp_path / "resolved"))
    checked = run_module.resolve_for_training(_cfg(tmp_path / "out"))
    assert calls == ["engine", f"folders {tmp_path / 'out'}", f"folders {tmp_path / 'resolved'}"]
    assert checked.config.training.output_dir == str(tmp_path / "resolved")


def test_the_start_notes_say_a_learning_rate_on_the_wrong_scale_for_the_optimizer():
    """Issue 76: --optimizer prodigy with the config's 1e-3 trained at a thousandth of its step without a word."""
    from dit_lora.registry import get_spec
    from dit_lora.training import run_start as run_module

    lines: list[str] = []
    run_module._log_start_notes(_cfg("out", optimizer="prodigy", learning_rate=1e-3), get_spec("sana"), lines.append)
    assert any(line.startswith("warning: --optimizer prodigy with --learning_rate 0.001") for line in lines)
    lines.clear()
    run_module._log_start_notes(_cfg("out", optimizer="prodigy", learning_rate=1.0), get_spec("sana"), lines.append)
    assert not any("learning_rate" in line for line in lines)
