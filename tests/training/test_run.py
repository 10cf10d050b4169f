"""Setup stages' own checks (the stages themselves are exercised by every recipe run in tests/e2e)."""

from __future__ import annotations

import pytest
import torch

from dit_lora.core.errors import UserError
# imported at collection: conftest replaces run.check_output_dir during quick tests (it guards training)
from dit_lora.training.run import check_output_dir, check_same_trainables


def test_a_checkpoint_of_other_trainables_is_refused_in_one_paragraph():
    """Resuming with another --rank (or after a version that chooses another default rank) names the tensor and
    the fix instead of failing in copy_ with a shape error."""
    params = {"blocks.0.to_q.lora_A.default.weight": torch.nn.Parameter(torch.zeros(4, 32))}
    check_same_trainables({"blocks.0.to_q.lora_A.default.weight": torch.zeros(4, 32)}, params, "ckpt-4")
    with pytest.raises(UserError, match=r"ckpt-4 .* builds blocks.0.to_q.lora_A.default.weight as \(4, 32\), the "
                                        r"checkpoint holds \(16, 32\).*--rank"):
        check_same_trainables({"blocks.0.to_q.lora_A.default.weight": torch.zeros(16, 32)}, params, "ckpt-4")
    with pytest.raises(UserError, match="this run has no blocks.1.to_k.lora_A.default.weight"):
        check_same_trainables({"blocks.1.to_k.lora_A.default.weight": torch.zeros(4, 32)}, params, "ckpt-4")


def _cfg(out, **overrides):
    from dit_lora.config import TrainConfig

    return TrainConfig(family="sana", pretrained_model_name_or_path="m", output_dir=str(out), **overrides)


def _folders(out, *names):
    for name in names:
        (out / name).mkdir(parents=True)
        (out / name / "optimizer.bin").write_bytes(b"x")


def test_a_fresh_run_among_old_checkpoints_is_refused_in_one_paragraph(tmp_path):
    """A run that does not resume never mixes with an older run's checkpoints: pruning by step would remove its
    own newest ones, and `latest` would resume the older run."""
    _folders(tmp_path, "checkpoint-35", "checkpoint-40", ".tmp-checkpoint-41")
    with pytest.raises(UserError) as info:
        check_output_dir(_cfg(tmp_path))
    text = str(info.value)
    assert "(.tmp-checkpoint-41, checkpoint-35, checkpoint-40)" in text and "\n" not in text
    assert "--resume_from_checkpoint latest" in text and "--overwrite_output_dir" in text
    assert check_output_dir(_cfg(tmp_path, resume_from_checkpoint="latest")) is None  # resuming: kept
    assert sorted(p.name for p in tmp_path.iterdir()) == [".tmp-checkpoint-41", "checkpoint-35", "checkpoint-40"]


def test_overwrite_output_dir_removes_old_checkpoints_with_one_line(tmp_path):
    _folders(tmp_path, "checkpoint-35", ".old-checkpoint-40", "logs")
    note = check_output_dir(_cfg(tmp_path, overwrite_output_dir=True))
    assert note == (f"--overwrite_output_dir: removed 2 checkpoint folder(s) of an earlier run from {tmp_path} "
                    "(.old-checkpoint-40, checkpoint-35)")
    assert [p.name for p in tmp_path.iterdir()] == ["logs"]  # only checkpoint folders go
    assert check_output_dir(_cfg(tmp_path / "new")) is None


def test_accumulation_longer_than_an_epoch_is_refused_with_the_largest_sensible_value():
    from types import SimpleNamespace

    from dit_lora.training.run import check_accumulation

    cfg = SimpleNamespace(gradient_accumulation_steps=1_000_000_000, train_batch_size=4)
    with pytest.raises(UserError) as caught:
        check_accumulation(cfg, batches_per_epoch=8, samples=32, world=1)
    text = str(caught.value)
    assert "--gradient_accumulation_steps 1000000000" in text and "32 usable samples" in text
    assert text.endswith("Use at most --gradient_accumulation_steps 8, or add data.") and "\n" not in text
    check_accumulation(SimpleNamespace(gradient_accumulation_steps=8, train_batch_size=4), 8, 32, 1)  # one epoch: ok


@pytest.mark.slow
def test_a_run_with_accumulation_beyond_the_data_stops_before_training(tmp_path, tiny_sana, shapes_data):
    from helpers import train_in_process

    err, out = train_in_process(tiny_sana, shapes_data, tmp_path, max_train_steps=1, checkpointing_steps=0,
                                gradient_accumulation_steps=1_000_000_000)
    assert isinstance(err, UserError) and "Use at most --gradient_accumulation_steps" in str(err), repr(err)


def test_load_batch_gives_the_family_the_update_number_as_a_host_int():
    """``batch["step"]``: the loop and a fault replay both go through load_batch, so a family choosing per step
    (Wan A14B's alternating experts) sees the same number in both, and nothing is read from the device."""
    from types import SimpleNamespace

    import torch

    from dit_lora.training.run import Run

    class Family:
        def prepare_batch(self, comps, batch, device, cached):
            return {k: v.to(device) if isinstance(v, torch.Tensor) else v for k, v in batch.items()}

    fake = SimpleNamespace(spec=SimpleNamespace(loss=Family()), comps=None, accelerator=SimpleNamespace(device=torch.device("cpu")),
                           data=SimpleNamespace(cached=True), hooks=SimpleNamespace(injector=None))
    for step in (1, 2, 7):
        out = Run.load_batch(fake, {"latents": torch.zeros(2, 3), "sample_index": [0, 1]}, step)
        assert out["step"] == step and type(out["step"]) is int
        assert out["latents"].shape == (2, 3)


def test_the_memory_gate_logs_a_narrow_fit_with_the_card_and_the_margin(monkeypatch):
    """A run whose prediction is under the device's memory but inside the plan's error starts, and its log says so:
    the card by name, "fits, narrowly", the margin kept and the flags that keep it; one that fits with it says
    nothing more than the plan's line."""
    from types import SimpleNamespace

    from dit_lora.plan import ladder, report
    from dit_lora.plan.estimate import Plan
    from dit_lora.plan.tracing import StepTrace
    from dit_lora.training import run as run_module

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
    from dit_lora.training import run as run_module
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


@pytest.mark.slow
def test_batch_larger_than_the_data_trains_at_the_data_size_and_says_so(tiny_sana, tmp_path, capsys):
    """The issue's run: --train_batch_size 64 on 4 images trained at batch 4 while the log and the card said 64."""
    from helpers import train_in_process

    from dit_lora.data.synthetic.shapes import make_shapes_dataset

    data = make_shapes_dataset(tmp_path / "four", n=4, size=64, seed=0)
    summary, out = train_in_process(tiny_sana, data, tmp_path, max_train_steps=1, train_batch_size=64,
                                    resolution=32, mixed_precision="no", lr_warmup_steps=0)
    assert isinstance(summary, dict), summary
    assert summary["train_batch_size"] == 4 and summary["config"]["train_batch_size"] == 64
    printed = " ".join(capsys.readouterr().out.split())
    assert ("--train_batch_size 64: the data has 4 usable sample(s), so each micro-batch holds at most 4: training "
            "at batch 4") in printed
    assert "process(es), batch 4 x accumulation" in printed
    assert "| train_batch_size | 4 (--train_batch_size 64;" in (out / "README.md").read_text()


class _Stop(Exception):
    pass


def _count_checks(monkeypatch, resolved_out=None):
    """Count the engine and folder checks of a setup stopped right after the accelerator is built; ``resolved_out``:
    the --output_dir the (stand-in) resolution chooses, else the config's own."""
    from dataclasses import replace

    from dit_lora.core.engine import EngineChoice
    from dit_lora.setup.resolve import Resolved
    from dit_lora.training import run as run_module

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

    run_module, calls = _count_checks(monkeypatch)
    out = tmp_path / "out"
    try:
        with pytest.raises(_Stop):
            run_module.setup(run_module.resolve_for_training(_cfg(out)))
        assert calls == ["engine", f"folders {out}"]
        calls.clear()
        with pytest.raises(_Stop):  # a config built in code: resolved (and judged) inside setup
            run_module.setup(_cfg(out))
        assert calls == ["engine", f"folders {out}"]
        calls.clear()
        with pytest.raises(_Stop):  # resolved another way: judged in setup, once
            run_module.setup(Resolved(_cfg(out), None, None))
        assert calls == ["engine", f"folders {out}"]
    finally:
        AcceleratorState._reset_state(True)


def test_folders_the_resolution_changed_are_judged_again(monkeypatch, tmp_path):
    """Resolving may change what the folder check reads (a demo, the defaults): those are judged too, once."""
    run_module, calls = _count_checks(monkeypatch, resolved_out=str(tmp_path / "resolved"))
    checked = run_module.resolve_for_training(_cfg(tmp_path / "out"))
    assert calls == ["engine", f"folders {tmp_path / 'out'}", f"folders {tmp_path / 'resolved'}"]
    assert checked.config.training.output_dir == str(tmp_path / "resolved")


def test_a_paired_batch_is_prepared_twice_with_one_step_number():
    """Prior preservation's class images go through the family's prepare_batch as the instance images do, with the
    same update number (Wan A14B picks its expert by it)."""
    from types import SimpleNamespace

    from dit_lora.data.batches import PRIOR
    from dit_lora.training.run import Run

    prepared = []

    def prepare_batch(comps, batch, device, cached):
        prepared.append(sorted(batch))
        return {**batch, "on": device}

    fake = SimpleNamespace(spec=SimpleNamespace(loss=SimpleNamespace(prepare_batch=prepare_batch)), comps=None,
                           accelerator=SimpleNamespace(device="cpu"), data=SimpleNamespace(cached=True),
                           hooks=SimpleNamespace(injector=None))
    out = Run.load_batch(fake, {"x": 1, PRIOR: {"y": 2}}, 7)
    assert prepared == [["x"], ["y"]] and out["step"] == out[PRIOR]["step"] == 7 and out[PRIOR]["on"] == "cpu"


def test_validation_epochs_become_updates():
    from dit_lora.config import TrainConfig
    from dit_lora.training.run import validation_every_epochs

    lines = []
    cfg = validation_every_epochs(TrainConfig.for_family("sana", validation_epochs=25), 2, lines.append)
    assert cfg.validation.validation_steps == 50 and lines == ["--validation_epochs 25: validating every 50 updates "
                                                               "(2 an epoch)"]


def test_the_start_notes_say_a_learning_rate_on_the_wrong_scale_for_the_optimizer():
    """Issue 76: --optimizer prodigy with the config's 1e-3 trained at a thousandth of its step without a word."""
    from dit_lora.registry import get_spec
    from dit_lora.training import run as run_module

    lines: list[str] = []
    run_module._log_start_notes(_cfg("out", optimizer="prodigy", learning_rate=1e-3), get_spec("sana"), lines.append)
    assert any(line.startswith("warning: --optimizer prodigy with --learning_rate 0.001") for line in lines)
    lines.clear()
    run_module._log_start_notes(_cfg("out", optimizer="prodigy", learning_rate=1.0), get_spec("sana"), lines.append)
    assert not any("learning_rate" in line for line in lines)
