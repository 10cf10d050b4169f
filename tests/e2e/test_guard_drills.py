"""The finite-step guard end to end on tiny Sana: skipped steps change nothing, rollbacks, diagnosis, stops."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

from helpers import base_args, free_port, read_summary, run_recipe
from helpers import train_in_process as _train


class StateRecorder:
    """Copies trainable parameters, optimizer moments/step and learning rates after every update."""

    def __init__(self):
        self.states: dict[int, dict] = {}

    def __call__(self, step, model, optimizer):
        params = {n: p.detach().clone() for n, p in model.named_parameters() if p.requires_grad}
        moments = {}
        for gi, group in enumerate(optimizer.param_groups):
            for pi, p in enumerate(group["params"]):
                for k, v in optimizer.state.get(p, {}).items():
                    moments[f"{gi}.{pi}.{k}"] = v.detach().clone()
        lrs = [float(g["lr"]) for g in optimizer.param_groups]
        self.states[step] = {"params": params, "moments": moments, "lrs": lrs}


def _same(a: dict, b: dict) -> bool:
    return (a["lrs"] == b["lrs"] and a["params"].keys() == b["params"].keys()
            and all(torch.equal(a["params"][k], b["params"][k]) for k in a["params"])
            and a["moments"].keys() == b["moments"].keys()
            and all(torch.equal(a["moments"][k], b["moments"][k]) for k in a["moments"]))


def _all_files_finite(out: Path) -> None:
    files = list(Path(out).rglob("*.safetensors"))
    assert files
    for f in files:
        for name, t in load_file(str(f)).items():
            assert torch.isfinite(t.float()).all(), f"{f}:{name} is not finite"


@pytest.mark.slow
def test_skipped_steps_change_nothing_bitwise(tiny_sana, shapes_data, tmp_path):
    rec = StateRecorder()
    summary, out = _train(tiny_sana, shapes_data, tmp_path, on_step=rec,
                          inject_faults="nan_loss@3,inf_grad@5,nan_batch@7,nan_grad@8")
    assert isinstance(summary, dict), summary
    for bad in (3, 5, 7, 8):
        assert _same(rec.states[bad], rec.states[bad - 1]), f"step {bad} changed the state"
    for good in (2, 4, 6, 9, 10):
        assert not _same(rec.states[good], rec.states[good - 1]), f"step {good} was not applied"
    # The fused optimizer's step count is the number of applied updates: 6 of 10.
    steps = [v for k, v in rec.states[10]["moments"].items() if k.endswith(".step")]
    assert steps and all(float(s) == 6 for s in steps)
    # The LR schedule advanced only on applied steps: after step 10 it is where a clean run is after 6.
    clean = StateRecorder()
    _train(tiny_sana, shapes_data, tmp_path / "clean", on_step=clean)
    assert rec.states[10]["lrs"] == clean.states[6]["lrs"]
    assert summary["skipped_steps"] == 4 and summary["rollbacks"] == 0
    assert summary["nonfinite_losses"] == 2  # nan_loss@3 and nan_batch@7
    assert summary["nonfinite_grads"] == 3  # inf_grad@5, nan_batch@7, nan_grad@8
    assert summary["applied_updates"] == 6 and summary["status"] == "completed"
    report = json.loads((out / "nonfinite_report.json").read_text())
    assert report["first_fault"]["step"] == 3 and report["status"] == "completed"
    _all_files_finite(out)


@pytest.mark.slow
@pytest.mark.parametrize("fault,expected", [("nan_batch", "data"), ("overflow", "precision"), ("inf_grad", "model/optimizer")])
def test_first_fault_is_diagnosed(tiny_sana, shapes_data, tmp_path, fault, expected):
    summary, out = _train(tiny_sana, shapes_data, tmp_path, inject_faults=f"{fault}@2", max_train_steps=3)
    assert isinstance(summary, dict), summary
    assert summary["skipped_steps"] == 1
    report = json.loads((out / "nonfinite_report.json").read_text())
    first = report["first_fault"]
    assert first["classification"] == expected, first
    assert first["step"] == 2
    text = json.dumps(first)
    if expected == "data":
        # The poisoned row is the first sample of the micro-batch: its file is named.
        assert str(shapes_data) in json.dumps(first["inputs"]), first
    if expected == "precision":
        assert "attn" in text


@pytest.mark.slow
def test_persistent_fault_rolls_back_then_stops_with_last_finite_adapter(tiny_sana, shapes_data, tmp_path):
    rec = StateRecorder()
    err, out = _train(tiny_sana, shapes_data, tmp_path, on_step=rec, max_train_steps=30, inject_faults="nan_loss@5-30",
                      max_consecutive_skips=2, max_rollbacks=2, rollback_lr_factor=0.5)
    from dit_lora.training.recovery import RunStopped

    assert isinstance(err, RunStopped), err
    assert err.exit_code == 3
    summary = read_summary(out)
    assert summary["status"] == "stopped_nonfinite" and summary["rollbacks"] == 3
    assert [e["lr_factor"] for e in summary["rollback_events"]] == [0.5, 0.25, 0.125]
    # The adapter holds the last good weights: those after step 4 (the snapshot taken at the check of step 4).
    adapter = load_file(str(out / "pytorch_lora_weights.safetensors"))
    assert len(adapter) == len(rec.states[4]["params"])
    # The export folds lora_alpha / rank into lora_B.
    scale = summary["config"]["lora_alpha"] / summary["config"]["rank"] if summary["config"]["lora_alpha"] else 1.0
    total = sum(v.float().abs().sum() * (scale if ".lora_B." in k else 1.0)
                for k, v in rec.states[4]["params"].items() if v.ndim)
    saved = sum(v.float().abs().sum() for v in adapter.values())
    assert torch.isclose(total, saved, rtol=1e-5)
    report = json.loads((out / "nonfinite_report.json").read_text())
    assert report["status"] == "stopped" and len(report["rollbacks"]) == 3 and report["first_fault"]["step"] == 5
    _all_files_finite(out)


@pytest.mark.slow
def test_transient_fault_rolls_back_and_recovers(tiny_sana, shapes_data, tmp_path):
    rec = StateRecorder()
    summary, out = _train(tiny_sana, shapes_data, tmp_path, on_step=rec, max_train_steps=12,
                          inject_faults="inf_loss@3-6", max_consecutive_skips=2, lr_scheduler="constant")
    assert isinstance(summary, dict), summary
    assert summary["status"] == "completed" and summary["rollbacks"] >= 1
    assert summary["skipped_steps"] == 4
    # Learning rate halved once per rollback, and training went on afterwards.
    assert rec.states[12]["lrs"][0] == pytest.approx(1e-3 * 0.5 ** summary["rollbacks"])
    assert not _same(rec.states[12], rec.states[11])
    _all_files_finite(out)


@pytest.mark.slow
def test_loss_spike_guard(tiny_sana, shapes_data, tmp_path):
    summary, _ = _train(tiny_sana, shapes_data, tmp_path, max_train_steps=26, inject_faults="spike@24",
                        skip_loss_spikes=6, lr_scheduler="constant", learning_rate=1e-4)
    assert isinstance(summary, dict), summary
    assert summary["loss_spikes"] == 1 and summary["skipped_steps"] == 1
    without, _ = _train(tiny_sana, shapes_data, tmp_path / "off", max_train_steps=26, inject_faults="spike@24",
                        lr_scheduler="constant", learning_rate=1e-4)
    assert without["skipped_steps"] == 0  # a finite spike passes without the option


def _assert_labelled_last_finite(out: Path, summary: dict) -> None:
    """The verdict's run: its adapter is written, finite, and called the last finite state in summary and card."""
    assert summary["status"] == "mostly_skipped", summary["status"]
    assert "were skipped" in summary["verdict"] and "last finite state" in summary["verdict"], summary["verdict"]
    card = (out / "README.md").read_text()
    assert "last finite state of a failed run" in card and summary["verdict"] in card
    assert (out / "pytorch_lora_weights.safetensors").is_file()
    _all_files_finite(out)


@pytest.mark.slow
def test_absurd_learning_rate_ends_with_a_verdict_not_finished(tiny_sana, shapes_data, tmp_path):
    """Default guard flags: a run that skips most of its updates exits 3 and labels its last finite adapter.

    (20 steps at the default --max_consecutive_skips 8 allow at most 2 rollbacks, under the default
    --max_rollbacks 3: the run always reaches its end, so the verdict, not the stop, must end it.)"""
    result, out = _train(tiny_sana, shapes_data, tmp_path, learning_rate=1e6, max_train_steps=20,
                         lr_scheduler="constant")
    from dit_lora.training.recovery import RunUnhealthy

    assert isinstance(result, RunUnhealthy) and result.exit_code == 3, result
    assert "were skipped" in str(result) and "--max_skipped_fraction" in str(result)
    summary = read_summary(out)
    assert summary["skipped_steps"] > 10 and summary["rollbacks"] <= 2
    assert summary["verdict"] == str(result)
    _assert_labelled_last_finite(out, summary)


@pytest.mark.slow
def test_the_verdict_through_the_recipe_exits_3_with_the_diagnosis(tiny_sana, shapes_data, tmp_path):
    """What a user sees: the recipe at --learning_rate 1e6 exits 3 (not 0 with 'finished'), prints the verdict
    with the first fault's diagnosis, and leaves the labelled last finite adapter."""
    out = tmp_path / "out"
    proc = run_recipe(base_args(tiny_sana, shapes_data, out, tmp_path / "cache", learning_rate=1e6,
                                max_train_steps=12, lr_scheduler="constant", resolution=32, train_batch_size=2),
                      warm=True)
    text = " ".join((proc.stdout + proc.stderr).split())
    assert proc.returncode == 3, proc.stdout[-2000:] + proc.stderr[-3000:]
    assert "Training reached its last step, but" in text and "were skipped" in text, text[-3000:]
    assert "First fault:" in text and "--max_skipped_fraction" in text and "Traceback" not in text
    summary = read_summary(out)
    assert summary["steps"] == 12 and summary["skipped_steps"] > 6
    squeeze = lambda t: "".join(t.split())  # noqa: E731 - the message is wrapped (also at hyphens)
    assert squeeze(summary["verdict"]) in squeeze(proc.stderr)  # the paragraph printed is the one recorded
    _assert_labelled_last_finite(out, summary)


@pytest.mark.slow
def test_a_last_window_without_an_applied_update_is_a_failed_run(tiny_sana, shapes_data, tmp_path):
    # 4 of 20 updates skipped (under the 0.5 fraction) but all of them in the last check window (17-20).
    result, out = _train(tiny_sana, shapes_data, tmp_path, max_train_steps=20, inject_faults="nan_loss@17-20")
    from dit_lora.training.recovery import RunUnhealthy

    assert isinstance(result, RunUnhealthy), result
    assert "last check window" in str(result)
    summary = read_summary(out)
    assert summary["status"] == "mostly_skipped" and summary["skipped_steps"] == 4 and summary["rollbacks"] == 0
    accepted, _ = _train(tiny_sana, shapes_data, tmp_path / "more", max_train_steps=20, inject_faults="nan_loss@9-12")
    assert isinstance(accepted, dict) and accepted["status"] == "completed" and accepted["verdict"] is None


@pytest.mark.slow
def test_fault_spec_errors_are_one_paragraph(tiny_sana, shapes_data, tmp_path):
    proc = run_recipe(base_args(tiny_sana, shapes_data, tmp_path / "o", tmp_path / "c", inject_faults="nan_los@3"),
                      warm=True)
    assert proc.returncode == 2
    assert "nan_loss" in proc.stderr and "Traceback" not in proc.stderr


@pytest.mark.slow
def test_guard_agrees_across_two_processes(tiny_sana, shapes_data, tmp_path):
    """A NaN loss on rank 1 only (its gradients stay finite) must skip the step on rank 0 too. With
    --activation_offloading: its saved-tensor hooks sit on the modules DDP wraps."""
    import sys

    out = tmp_path / "out"
    launcher = [sys.executable, "-m", "accelerate.commands.launch", "--multi_gpu", "--num_processes", "2",
                "--num_machines", "1", "--mixed_precision", "bf16", "--main_process_port", str(free_port())]
    proc = run_recipe(base_args(tiny_sana, shapes_data, out, tmp_path / "cache", max_train_steps=4,
                                train_batch_size=2, inject_faults="nan_loss@2:rank1", attention_canary="false",
                                activation_offloading="true"),
                      launcher=launcher, timeout=300, warm=True)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "activation offloading: the saved activations" in proc.stdout + proc.stderr
    summary = read_summary(out)
    assert summary["num_processes"] == 2 and summary["config"]["activation_offloading"] is True
    assert summary["skipped_steps"] == 1 and summary["nonfinite_losses"] == 1 and summary["nonfinite_grads"] == 0
    report = json.loads((out / "nonfinite_report.json").read_text())
    assert report["first_fault"]["rank"] == 1



@pytest.mark.slow
def test_fault_drills_on_dit(tiny_dit, shape_classes, tmp_path):
    """The same guarantees on the class-conditional DiT family (no family-specific guard code)."""
    rec = StateRecorder()
    summary, out = _train(tiny_dit, shape_classes, tmp_path, on_step=rec, family="dit", num_classes=3,
                          max_train_steps=7, inject_faults="nan_loss@2,inf_grad@3,nan_batch@4,overflow@5",
                          max_skipped_fraction=1.0)  # a drill: 4 of 7 skipped on purpose
    assert isinstance(summary, dict), summary
    for bad in (2, 3, 4, 5):
        assert _same(rec.states[bad], rec.states[bad - 1]), f"step {bad} changed the state"
    assert not _same(rec.states[6], rec.states[5])
    assert summary["skipped_steps"] == 4 and summary["applied_updates"] == 3
    report = json.loads((out / "nonfinite_report.json").read_text())
    assert report["first_fault"]["step"] == 2 and report["first_fault"]["classification"] == "model/optimizer"
    _all_files_finite(out)


@pytest.fixture(scope="module")
def tiny_wan(tmp_path_factory) -> tuple[Path, Path]:
    """The tiny Wan 2.1 text-to-video pipeline and 4 moving-square clips (9 frames of 64 px at 16 fps)."""
    from dit_lora.data.synthetic.clips import make_moving_square_dataset
    from dit_lora.families.wan.demo import build_tiny_wan_pipeline

    root = tmp_path_factory.mktemp("wan-drills")
    return (build_tiny_wan_pipeline(root / "tiny-wan", variant="2.1-t2v"),
            make_moving_square_dataset(root / "clips", n=4, num_frames=9, fps=16, seed=3))


#: Wan's video flags (the tiny pipeline's 9 x 64 x 64; fp32, as the video families' e2e tests on a CPU)
WAN = dict(family="wan", resolution=None, center_crop=None, max_num_frames=9, height=64, width=64, train_batch_size=2,
           mixed_precision="no")


@pytest.mark.slow
def test_fault_drills_on_wan(tiny_wan, tmp_path):
    """The same guarantees on a video family (Wan 2.1 T2V: cached clip latents, rectified-flow loss): each drilled
    update leaves every weight, moment and learning rate as it was; the first fault is diagnosed as bad data naming
    the clip."""
    model, clips = tiny_wan
    rec = StateRecorder()
    summary, out = _train(model, clips, tmp_path, on_step=rec, **WAN, max_train_steps=6,
                          inject_faults="nan_batch@2,nan_loss@3,inf_grad@4,nan_grad@5",
                          max_skipped_fraction=1.0)  # a drill: 4 of 6 skipped on purpose
    assert isinstance(summary, dict), summary
    for bad in (2, 3, 4, 5):
        assert _same(rec.states[bad], rec.states[bad - 1]), f"step {bad} changed the state"
    assert not _same(rec.states[6], rec.states[5])
    assert summary["skipped_steps"] == 4 and summary["applied_updates"] == 2 and summary["status"] == "completed"
    assert summary["nonfinite_losses"] == 2 and summary["nonfinite_grads"] == 3  # nan_batch: both
    first = json.loads((out / "nonfinite_report.json").read_text())["first_fault"]
    assert first["step"] == 2 and first["classification"] == "data", first
    assert str(clips) in json.dumps(first["inputs"]), first["inputs"]  # the poisoned clip is named
    _all_files_finite(out)


@pytest.mark.slow
def test_wan_fault_streak_rolls_back_and_ends_with_the_verdict(tiny_wan, tmp_path):
    """A NaN streak over Wan's last 4 of 8 updates: each 2 in a row roll back to the step-4 weights at a halved
    learning rate; the run ends with the verdict (exit 3) and the step-4 adapter, labelled the last finite state."""
    from dit_lora.training.recovery import RunUnhealthy

    model, clips = tiny_wan
    rec = StateRecorder()
    result, out = _train(model, clips, tmp_path, on_step=rec, **WAN, max_train_steps=8, inject_faults="nan_loss@5-8",
                         max_consecutive_skips=2, lr_scheduler="constant")
    assert isinstance(result, RunUnhealthy) and result.exit_code == 3, result
    assert "last check window" in str(result)
    summary = read_summary(out)
    assert [(e["step"], e["restored_step"], e["lr_factor"]) for e in summary["rollback_events"]] == [
        (6, 4, 0.5), (8, 4, 0.25)]
    assert summary["skipped_steps"] == 4 and summary["applied_updates"] == 4
    assert summary["verdict"] == str(result)
    _assert_labelled_last_finite(out, summary)
    # The adapter is the step-4 weights (alpha 8 / rank 4 folded into lora_B).
    adapter = load_file(str(out / "pytorch_lora_weights.safetensors"))
    trained = rec.states[4]["params"]
    assert len(adapter) == len(trained)
    for name, value in trained.items():
        assert torch.equal(adapter["transformer." + name.replace(".default.", ".")],
                           value * 2 if ".lora_B." in name else value), name
    report = json.loads((out / "nonfinite_report.json").read_text())
    assert report["first_fault"]["step"] == 5 and len(report["rollbacks"]) == 2


@pytest.fixture
def restore_attention():
    import torch.nn.functional as F

    from dit_lora.training.canary import restore_sdpa_backends, sdpa_backend_flags

    flags, sdpa = sdpa_backend_flags(), F.scaled_dot_product_attention
    yield
    F.scaled_dot_product_attention = sdpa
    restore_sdpa_backends(flags)


@pytest.mark.slow
def test_attention_canary_falls_back_from_a_broken_kernel(tiny_sana, shapes_data, tmp_path, restore_attention, capsys):
    summary, _ = _train(tiny_sana, shapes_data, tmp_path, inject_faults="broken_attention", attention_canary="true",
                        max_train_steps=4)
    assert isinstance(summary, dict), summary
    assert summary["skipped_steps"] == 0
    assert "math" in capsys.readouterr().out


@pytest.mark.slow
def test_without_the_canary_a_broken_kernel_is_stopped_not_trained(tiny_sana, shapes_data, tmp_path, restore_attention):
    from dit_lora.training.recovery import RunStopped

    # --kernels off: diffusers' own processors, so neither the canary nor the kernel checks can catch it
    err, out = _train(tiny_sana, shapes_data, tmp_path, inject_faults="broken_attention", attention_canary="false",
                      max_train_steps=20, max_consecutive_skips=2, max_rollbacks=1, kernels="off")
    assert isinstance(err, RunStopped), err
    summary = read_summary(out)
    assert summary["applied_updates"] == 0 and summary["status"] == "stopped_nonfinite"
    report = json.loads((out / "nonfinite_report.json").read_text())
    assert report["first_fault"]["first_module"]["attention"] is not None, report["first_fault"]
    _all_files_finite(out)


@pytest.mark.gpu
@pytest.mark.slow
def test_guarded_steps_never_sync_on_cuda(tiny_sana, shapes_data, tmp_path):
    """With DIT_LORA_SYNC_DEBUG=1 every training step runs under torch.cuda.set_sync_debug_mode("error")."""
    out = tmp_path / "out"
    proc = run_recipe(base_args(tiny_sana, shapes_data, out, tmp_path / "cache", max_train_steps=12,
                                inject_faults="nan_loss@3,inf_grad@5", skip_loss_spikes=6),
                      env={"DIT_LORA_SYNC_DEBUG": "1"})
    assert proc.returncode == 0, proc.stderr[-3000:]
    summary = read_summary(out)
    assert summary["device"].startswith("cuda") and summary["skipped_steps"] == 2


@pytest.mark.slow
def test_without_the_guard_a_bad_gradient_poisons_the_run(tiny_sana, shapes_data, tmp_path):
    """The control: --finite_guard false applies the Inf gradient, and nothing non-finite is written."""
    from dit_lora.output.adapter import NonFiniteWeightsError

    err, out = _train(tiny_sana, shapes_data, tmp_path, finite_guard="false", inject_faults="inf_grad@3", max_train_steps=4)
    assert isinstance(err, NonFiniteWeightsError), err
    assert not (out / "pytorch_lora_weights.safetensors").exists()


@pytest.mark.slow
def test_precision_audit_reports_a_stray_dtype_in_the_run(tiny_sana, shapes_data, tmp_path, monkeypatch):
    """A layer left in fp16 after loading is named in the log and in output_dir/precision_audit.json."""
    from dit_lora.families.sana.model import SanaModel

    original = SanaModel.load_components

    def load_with_fp16_norm(self, cfg, device):
        comps = original(self, cfg, device)
        comps.model.proj_out.to(torch.float16)
        return comps

    monkeypatch.setattr(SanaModel, "load_components", load_with_fp16_norm)
    summary, out = _train(tiny_sana, shapes_data, tmp_path, max_train_steps=2)
    assert isinstance(summary, dict), summary
    audit = json.loads((out / "precision_audit.json").read_text())
    assert audit and all(m["component"] == "model" and m["dtype"] == "float16" for m in audit)
    assert any(m["name"].startswith("proj_out") for m in audit)


@pytest.mark.slow
def test_guard_state_resumes_exactly_and_reaches_the_tracker(tiny_sana, shapes_data, tmp_path):
    """Counters, schedule position, LR factor and the rollback snapshot live in the checkpoint: stop at 4, resume to 8."""
    # The check at step 4 sees one skip in a row (no new snapshot: the last is step 2's) and the checkpoint at
    # step 4 holds the step-3 weights; the rollback at step 6 must return to step 2 in both runs.
    faults = "nan_loss@4-6"
    common = dict(inject_faults=faults, max_consecutive_skips=2, checkpointing_steps=4, lr_scheduler="cosine",
                  lr_warmup_steps=1)
    full, full_out = _train(tiny_sana, shapes_data, tmp_path / "full", max_train_steps=8, **common)
    assert isinstance(full, dict), full
    first, out = _train(tiny_sana, shapes_data, tmp_path / "split", max_train_steps=4, **common)
    assert isinstance(first, dict), first
    resumed, out = _train(tiny_sana, shapes_data, tmp_path / "split", max_train_steps=8, resume_from_checkpoint="latest",
                          overwrite_output_dir="true", report_to="tensorboard", **common)
    assert isinstance(resumed, dict), resumed
    for key in ("skipped_steps", "rollbacks", "nonfinite_losses", "applied_updates"):
        assert resumed[key] == full[key], key
    assert full["rollbacks"] == 1 and full["skipped_steps"] == 3
    assert full["rollback_events"][0]["restored_step"] == 2 == resumed["rollback_events"][0]["restored_step"]
    a = load_file(str(full_out / "pytorch_lora_weights.safetensors"))
    b = load_file(str(out / "pytorch_lora_weights.safetensors"))
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    events = EventAccumulator(str(next((out / "logs").rglob("events.out.tfevents.*")).parent))
    events.Reload()
    assert events.Scalars("skipped_steps")[-1].value == full["skipped_steps"]
    assert events.Scalars("rollbacks")[-1].value == full["rollbacks"]


@pytest.mark.gpu
@pytest.mark.slow
@pytest.mark.parametrize("max_grad_norm", [0.0, 1.0])
def test_fp16_skips_exactly_with_and_without_clipping(tiny_sana, shapes_data, tmp_path, max_grad_norm):
    """fp16 + --max_grad_norm 0 used to leave GradScaler's found_inf empty (nothing unscaled), so the
    scaler applied a step the guard had skipped (a NaN loss with finite gradients)."""
    rec = StateRecorder()
    summary, _ = _train(tiny_sana, shapes_data, tmp_path, on_step=rec, mixed_precision="fp16", allow_fp16="true",
                        max_grad_norm=max_grad_norm, inject_faults="nan_loss@3", max_train_steps=5)
    assert isinstance(summary, dict), summary
    assert _same(rec.states[3], rec.states[2]) and not _same(rec.states[4], rec.states[3])
    assert summary["skipped_steps"] == 1 and summary["applied_updates"] == 4
