"""The plan: extrapolation over depth, checkpointing, the gate's paragraph, the CLI and measured runs."""

import dataclasses
import json
import os
import subprocess
import sys

import pytest

from dit_lora.config import TrainConfig
from dit_lora.core.errors import UserError
from dit_lora.registry import get_family
from dit_lora.plan import plan_run
from dit_lora.plan.report import check_fits, format_plan
from helpers import ROOT, base_args, read_summary, run_recipe
from plan_readers import dit_reader


def _plan(num_layers: int, narrow: bool = False):
    cfg = TrainConfig(family="dit", pretrained_model_name_or_path="facebook/DiT-XL-2-256", resolution=64,
                      train_batch_size=2)
    return plan_run(cfg, get_family("dit"), dit_reader(num_layers, narrow), device="cuda")


@pytest.fixture(scope="module")
def dit_plan():
    """DiT-XL/2 narrowed, three blocks, 64 px, batch 2, both checkpointing settings."""
    return _plan(3, narrow=True)


def test_checkpointing_lowers_activations_and_costs_compute(dit_plan):
    plan = dit_plan
    off = next(s for s in plan.steps if not s.checkpointing)
    on = next(s for s in plan.steps if s.checkpointing)
    assert on.activation_bytes < off.activation_bytes
    assert on.flops > off.flops
    assert plan.trainable_params > 0 and plan.optimizer_bytes == 8 * plan.trainable_params
    assert "predicted peak per process" in format_plan(plan, capacity=2**40)


def test_the_gate_stops_with_the_fix_and_lets_a_fitting_run_start(dit_plan):
    plan = dit_plan
    assert check_fits(plan, 2 * plan.peak_memory_bytes, "this device") is None  # fits with the margin: no word
    assert check_fits(plan, plan.peak_memory_bytes, "this device").startswith(  # fits exactly: it starts, warned
        "memory plan on this device: fits, narrowly"
    )
    with pytest.raises(UserError) as err:
        check_fits(plan, plan.peak_memory_bytes // 4, "this cuda device")
    text = str(err.value)
    assert "--ignore_memory_plan" in text and "dit-lora plan" in text and "would not fit" in text


@pytest.mark.slow
def test_cli_plans_a_catalogued_checkpoint_without_downloading(tmp_path):
    env = {"HF_HUB_OFFLINE": "1", "HF_HOME": str(tmp_path / "hf")}  # an empty cache: the catalogue's configs
    proc = subprocess.run([sys.executable, "-m", "dit_lora.commands.cli", "plan", "--pretrained_model_name_or_path",
                           "facebook/DiT-XL-2-256", "--gpu_memory", "24GB", "--json"],
                          capture_output=True, text=True, env={**os.environ, **env}, cwd=ROOT, timeout=300)
    assert proc.returncode == 0, proc.stderr
    plan = json.loads(proc.stdout)
    assert plan["family"] == "dit" and plan["catalogue_entry"] == "facebook/DiT-XL-2-256"
    assert plan["depth"] == 28
    assert plan["steps"][0]["bucket"] == "256 x 256 px"  # the catalogue's resolution, not the schema's 1024
    # bf16 DiT-XL/2 (675M parameters) plus LoRA: 1.3 to 1.5 GiB of transformer weights
    assert 1.3 * 2**30 < plan["weights"]["model"] < 1.5 * 2**30
    assert plan["peak_memory_bytes"] < plan["capacity_bytes"] == 24 * 2**30


def test_cli_without_a_family_or_config_files_names_the_flag(tmp_path, capsys):
    """The console script's entry point in process (no interpreter to start): a refusal is its paragraph and a
    non-zero exit; any other error would propagate here instead of being printed."""
    from dit_lora.commands.cli import main

    folder = tmp_path / "empty"
    folder.mkdir()
    with pytest.raises(SystemExit) as ended:
        main(["plan", "--pretrained_model_name_or_path", str(folder)])
    assert ended.value.code not in (0, None)
    captured = capsys.readouterr()
    assert "--family" in captured.out + captured.err and "Traceback" not in captured.err


@pytest.mark.slow
@pytest.mark.parametrize("levers", [{"gradient_checkpointing": "true", "blocks_to_swap": 1}],
                         ids=["checkpointing-and-block-swap"])
def test_prediction_within_15_percent_of_the_measured_cpu_peak(tiny_sana, shapes_data, tmp_path, levers):
    """With two of the ladder's levers in one run (the tiny Sana's last block swapped). A run as given is the
    conformance suite's (every name's default-flag demo run, Sana's included, within the same 15%:
    conformance.PLAN_TOLERANCE)."""
    out = tmp_path / "out"
    proc = run_recipe(base_args(tiny_sana, shapes_data, out, tmp_path / "cache", max_train_steps=2,
                                ignore_memory_plan="false", **levers))
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "memory plan: predicted peak" in proc.stdout
    summary = read_summary(out)
    predicted, measured = summary["memory_plan"]["peak_memory_bytes"], summary["peak_memory_bytes"]
    assert abs(predicted - measured) / measured < 0.15, (predicted, measured)
    assert summary["memory_plan"]["blocks_to_swap"] == levers.get("blocks_to_swap", 0)


@pytest.mark.slow
def test_a_run_that_would_not_fit_stops_before_loading(tiny_sana, shapes_data, tmp_path, monkeypatch):
    """The recipe's gate: with the device's memory below the prediction, nothing loads and the paragraph says why."""
    from helpers import train_in_process

    from dit_lora.families.sana.model import SanaModel
    from dit_lora.plan import report

    monkeypatch.setattr(report, "device_memory", lambda device: 1 << 20)  # a 1 MiB device

    def never(*args, **kwargs):
        raise AssertionError("the model loaded although the plan said it would not fit")

    monkeypatch.setattr(SanaModel, "load_components", never)
    err, out = train_in_process(tiny_sana, shapes_data, tmp_path, max_train_steps=2, ignore_memory_plan="false")
    assert isinstance(err, UserError), err
    assert "would not fit" in str(err) and "--ignore_memory_plan" in str(err)
    assert not (out / "train_summary.json").exists()

    monkeypatch.undo()
    monkeypatch.setattr(report, "device_memory", lambda device: 1 << 20)
    summary, _ = train_in_process(tiny_sana, shapes_data, tmp_path / "anyway", max_train_steps=2,
                                  ignore_memory_plan="true")
    assert isinstance(summary, dict), summary
    assert summary["memory_plan"] is None


def test_measured_cpu_peak_is_the_runs_own_not_its_launchers():
    """Linux carries a launcher's resident size into a child's ru_maxrss across fork and exec: a recipe started
    from a 1.5 GiB process would report at least 1.5 GiB. The summary's figure (VmHWM) is the run's own."""
    if not os.path.exists("/proc/self/status"):
        pytest.skip("no /proc")
    held = bytearray(1536 * 2**20)
    held[::4096] = b"\x01" * len(held[::4096])  # resident, not just reserved
    code = ("import resource, torch; from dit_lora.training.finish import _peak_memory_bytes; "
            "print(_peak_memory_bytes(torch.device('cpu')), resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024)")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, timeout=120)
    assert proc.returncode == 0, proc.stderr
    ours, inherited = map(int, proc.stdout.split())
    del held
    assert inherited >= 1536 * 2**20 > 2 * ours, (ours, inherited)
