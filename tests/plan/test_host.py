"""plan/host.py: on an accelerator the plan says the host memory a run needs: the model files' pages mapped while
loading (apart: the system can drop them), the copies made at load, what is pinned while training, and the
process; each lever moves the figure it should."""

import dataclasses

import pytest

from dit_lora.config import TrainConfig
from dit_lora.families.dit.demo import build_tiny_dit_pipeline
from dit_lora.plan import host, make_plan
from dit_lora.plan.report import format_plan
from dit_lora.registry import get_family

GIB = 2**30


@pytest.fixture(scope="module")
def tiny_dit(tmp_path_factory):
    """The DiT demo's pipeline: fp32 files (DiT's published dtype), so a bf16 run converts it at load."""
    return build_tiny_dit_pipeline(tmp_path_factory.mktemp("dit") / "tiny")


def _plan(folder, device="cuda", **values):
    cfg = TrainConfig.for_family("dit", pretrained_model_name_or_path=str(folder), resolution=32, **values)
    return make_plan(cfg, get_family("dit"), device=device, both_settings=False)


def _file_bytes(folder, component):
    from safetensors import safe_open

    total = 0
    for file in (folder / component).glob("*.safetensors"):
        with safe_open(str(file), "pt") as f:
            total += sum(_numel(f, k) * 4 for k in f.keys())
    return total


def _numel(f, key):
    size = 1
    for n in f.get_slice(key).get_shape():
        size *= n
    return size


def test_a_bf16_run_of_fp32_files_maps_the_files_and_copies_them_converted(tiny_dit):
    plan = _plan(tiny_dit)
    assert plan.host_stored["model"] == _file_bytes(tiny_dit, "transformer")  # fp32, as the headers say
    assert plan.host_stored["vae"] == _file_bytes(tiny_dit, "vae")
    # the bf16 copy: half the files (a few small tensors stay fp32), the trainables not read from them
    assert plan.host_converted["model"] * 2 == pytest.approx(plan.host_stored["model"], rel=0.05)
    assert plan.host_converted["model"] < plan.weights["model"]
    assert host.mapped_bytes(plan) == sum(plan.host_stored.values())
    assert host.copied_bytes(plan) == sum(plan.host_converted.values())
    assert host.training_bytes(plan) == 0
    assert host.peak_bytes(plan) == host.mapped_bytes(plan) + host.copied_bytes(plan) + host.PROCESS_BYTES


def test_on_a_cpu_the_host_is_the_device_and_no_host_rows_are_printed(tiny_dit):
    plan = _plan(tiny_dit, device="cpu")
    assert host.peak_bytes(plan) == 0 and plan.host_stored == {}
    assert "host memory (RAM)" not in format_plan(plan)
    assert "host memory (RAM) at its peak" in format_plan(_plan(tiny_dit))


def test_the_levers_move_the_host_figures(tiny_dit):
    plan = _plan(tiny_dit)
    mapped, copied = host.mapped_bytes(plan), host.copied_bytes(plan)
    fp8 = dataclasses.replace(plan, quantized="fp8_scaled", fp8_linear_bytes=1000)
    assert host.mapped_bytes(fp8) == mapped  # the source pages are read to convert
    assert host.copied_bytes(fp8) == copied - plan.host_converted["model"] + 1000  # the fp8 model, not a bf16 copy
    nf4 = dataclasses.replace(plan, quantized="nf4")  # bitsandbytes quantizes onto the device while loading
    assert host.mapped_bytes(nf4) == mapped - plan.host_stored["model"]
    swapped = dataclasses.replace(plan, swapped_bytes=5 * GIB, ema_host_bytes=GIB)
    assert host.training_bytes(swapped) == 6 * GIB
    assert host.peak_bytes(swapped) == max(mapped + copied, 6 * GIB) + host.PROCESS_BYTES


def test_the_run_options_fill_the_fields_the_levers_read(tiny_dit):
    plan = _plan(tiny_dit, use_ema=True, ema_device="cpu")
    assert plan.ema_host_bytes == 4 * plan.trainable_params * 2  # fp32, and its snapshot under the guard
    assert _plan(tiny_dit, use_ema=True).ema_host_bytes == 0  # an EMA on the accelerator is the device's


def test_the_summary_says_what_the_system_can_drop(tiny_dit):
    plan = _plan(tiny_dit)
    text = host.summary(plan)
    assert text.startswith(f"{host.peak_bytes(plan) / GIB:.1f} GiB") and "model files' pages" in text
    pinned = dataclasses.replace(plan, swapped_bytes=100 * GIB)  # the training phase is the peak: nothing to drop
    assert host.summary(pinned) == f"{host.peak_bytes(pinned) / GIB:.1f} GiB"
