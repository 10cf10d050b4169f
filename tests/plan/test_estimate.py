"""The plan: extrapolation over depth, checkpointing, the gate's paragraph, the CLI and measured runs."""

import dataclasses
import json
import os
import subprocess
import sys

import pytest

from dit_lora.catalogue import by_hub_id
from dit_lora.config import TrainConfig
from dit_lora.core.errors import UserError
from dit_lora.registry import get_family
from dit_lora.plan import plan_run
from dit_lora.plan.report import check_fits, format_plan
from helpers import ROOT, base_args, read_summary, run_recipe


def _dit_reader(num_layers: int, narrow: bool):
    """DiT-XL-2-256's published configs with ``num_layers`` blocks (``narrow``: 2 heads of 16, for speed)."""
    configs = by_hub_id("facebook/DiT-XL-2-256").configs
    changes = {"num_layers": num_layers, **({"num_attention_heads": 2, "attention_head_dim": 16} if narrow else {})}

    def read(subfolder, filename):
        found = configs.get(f"{subfolder}/{filename}")
        if found is not None and subfolder == "transformer":
            found = {**found, **changes}
        return found

    return read


def _plan(num_layers: int, narrow: bool = False):
    cfg = TrainConfig(family="dit", pretrained_model_name_or_path="facebook/DiT-XL-2-256", resolution=64,
                      train_batch_size=2)
    return plan_run(cfg, get_family("dit"), _dit_reader(num_layers, narrow), device="cuda")


@pytest.mark.slow  # traces DiT-XL's real width five blocks deep: a minute and a half on 2 cores
def test_depth_extrapolation_matches_a_full_trace(monkeypatch):
    """Traced at 1 and 2 blocks and extrapolated to 5 == traced at all 5 blocks."""
    from dit_lora.plan import estimate

    extrapolated = _plan(5)
    monkeypatch.setattr(estimate, "_traces", lambda family, cfg, read, depth, settings, **kw: _direct(family, cfg,
                                                                                                      read, depth,
                                                                                                      settings))
    direct = _plan(5)
    for a, b in zip(extrapolated.steps, direct.steps):
        assert (a.bucket, a.checkpointing) == (b.bucket, b.checkpointing)
        assert a.activation_bytes == pytest.approx(b.activation_bytes, rel=0.02)
        assert a.flops == pytest.approx(b.flops, rel=0.001)
    assert extrapolated.weights == direct.weights


def _direct(family, cfg, read, depth, settings):
    """_traces without extrapolation: the full depth traced directly (no read shares: a CUDA plan counts every
    weight as resident)."""
    from dit_lora.plan import estimate
    from dit_lora.plan.fake import LiveBytes, fake_mode, fake_module

    steps, encode = [], 0
    for gc in settings:
        comps, _ = estimate._build(family, cfg, read, depth, gc)
        with fake_mode() as mode:
            for module in [comps.model, comps.encoders["vae"]]:
                fake_module(module, mode)
            live = LiveBytes()
            with live:
                batches = family.plan.plan_batches(cfg, comps)
            encode = max(encode, live.peak)
        for bucket, batch in batches:
            mem, flops = estimate._trace_step(family, cfg, comps, batch, mode)
            steps.append(estimate.StepTrace(bucket, gc, mem, flops))
    return steps, encode, {}


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


def test_a_family_without_the_memory_plan_capability_is_one_paragraph():
    from dit_lora.core.errors import UserError
    from dit_lora.registry import get_family
    from dit_lora.contract.capabilities import MemoryPlan
    from dit_lora.plan.estimate import planner

    sana = get_family("sana")  # a FamilySpec: its plan component is what the planner uses
    assert planner(sana) is sana.plan
    assert MemoryPlan in sana.capabilities

    def NoPlan():  # noqa: N802 - the same family without its memory plan
        return dataclasses.replace(sana, plan=None)

    with pytest.raises(UserError, match=r"The memory plan .* needs the MemoryPlan capability, which the `sana` family "
                                        r"does not declare \(depth_key, plan_batches"):
        planner(NoPlan())


def _swap_plan(blocks_to_swap: int, device: str):
    """DiT-XL/2 narrowed, eight blocks, the run's checkpointing setting only."""
    cfg = TrainConfig(family="dit", pretrained_model_name_or_path="facebook/DiT-XL-2-256", resolution=64,
                      train_batch_size=2, blocks_to_swap=blocks_to_swap)
    return plan_run(cfg, get_family("dit"), _dit_reader(8, narrow=True), device=device, both_settings=False)


@pytest.mark.parametrize("device", ["cuda", "cpu"])
def test_block_swap_takes_the_swapped_blocks_off_the_device_less_those_in_flight(device, monkeypatch):
    from dit_lora.modeling import cache_parking
    from dit_lora.plan.estimate import SWAP_IN_FLIGHT

    plain, swapped = _swap_plan(0, device), _swap_plan(6, device)
    block = swapped.swapped_bytes // 6
    assert block > 0 and swapped.swapped_bytes == 6 * block and plain.swapped_bytes == 0
    in_flight = SWAP_IN_FLIGHT["cpu" if device == "cpu" else "accelerator"]
    assert swapped.swap_in_flight_bytes == in_flight * block
    change = plain.train_phase_bytes() - swapped.train_phase_bytes()
    # every block waits in host memory while the cache is built, swapped or not: the same caching phase
    assert plain.blocks_wait and swapped.blocks_wait and plain.cache_phase_bytes == swapped.cache_phase_bytes
    monkeypatch.setattr(cache_parking, "run_caches", lambda cfg: False)
    kept, kept_swapped = _swap_plan(0, device), _swap_plan(6, device)
    assert not kept.blocks_wait
    if device == "cuda":  # six blocks in host memory, three of them on the device at the peak
        assert change == (6 - in_flight) * block
        # without the wait, only the swapped blocks are parked at load; with it, all eight
        assert kept.cache_phase_bytes - kept_swapped.cache_phase_bytes == 6 * block
        assert kept.cache_phase_bytes - plain.cache_phase_bytes == 8 * block
        assert "block swap (--blocks_to_swap 6)" in format_plan(swapped) and "in pinned host memory" in format_plan(
            swapped)
    else:  # the host memory is the device's: only the two copies in flight count; nothing parked is saved
        assert change == -in_flight * block
        assert kept.cache_phase_bytes == plain.cache_phase_bytes == kept_swapped.cache_phase_bytes
        assert "only the copies of the blocks in flight add" in format_plan(swapped)
