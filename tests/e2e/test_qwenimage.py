"""Qwen-Image end to end on the tiny offline pipeline: the shipped demo (bf16) trains through a guard drill, samples,
and its adapter reloads live in the stock QwenImagePipeline; on an fp8_scaled base, a run killed mid-step with
``--blocks_to_swap`` resumes to the bytes of the uninterrupted run without it (the swap changes no value, the resume is
exact, a NaN step is skipped in both) and reloads into the unquantized pipeline; ``--quantize_base nf4`` (with an nf4
Qwen2.5-VL and ``--activation_offloading``) trains through a NaN and reloads unquantized. Everything at 32 px, 3-4 steps, fp32 where bf16 is not the
point: six short runs."""

from __future__ import annotations

import json
import struct
from pathlib import Path

import pytest
import torch
import yaml
from PIL import Image
from safetensors.torch import load_file

from helpers import ROOT, base_args, read_summary, run_recipe

pytestmark = [pytest.mark.slow, pytest.mark.xdist_group("qwenimage-e2e")]
ADAPTER = "pytorch_lora_weights.safetensors"
#: short fp32 runs with a checkpoint at step 2 (the resume point)
OPTIONS = dict(resolution=32, train_batch_size=2, max_train_steps=4, checkpointing_steps=2, mixed_precision="no",
               attention_canary="false", rank=4, lora_alpha=8)


@pytest.fixture(scope="module")
def tiny(tmp_path_factory) -> Path:
    from dit_lora.families.qwenimage.demo import build_tiny_qwenimage_pipeline

    return build_tiny_qwenimage_pipeline(tmp_path_factory.mktemp("models") / "tiny-qwenimage")


@pytest.fixture(scope="module")
def data(tmp_path_factory) -> Path:
    from dit_lora.data.synthetic.shapes import make_shapes_dataset

    return make_shapes_dataset(tmp_path_factory.mktemp("data") / "shapes", n=4, size=32, seed=0)


def _run(args: list[str], env: dict | None = None, code: int = 0):
    proc = run_recipe(args, recipe="qwenimage", timeout=400, warm=True, env=env)
    assert proc.returncode == code, (proc.stdout + proc.stderr)[-6000:]
    return proc


def _file(out: Path) -> tuple[dict, bytes]:
    """The adapter as (header JSON, tensor bytes): the header's key order is not stable between saves."""
    raw = (out / ADAPTER).read_bytes()
    size = struct.unpack("<Q", raw[:8])[0]
    return json.loads(raw[8 : 8 + size]), raw[8 + size :]


def _reload_live(model: Path, out: Path) -> int:
    """Load the adapter into the stock, unquantized QwenImagePipeline: every saved module live and non-zero."""
    from diffusers import QwenImagePipeline

    pipe = QwenImagePipeline.from_pretrained(model, torch_dtype=torch.float32)
    pipe.load_lora_weights(out)
    saved = load_file(str(out / ADAPTER))
    assert saved and all(k.startswith("transformer.") for k in saved)
    live = {n: m for n, m in pipe.transformer.named_modules() if hasattr(m, "lora_B") and "default_0" in m.lora_B}
    assert len(live) == len(saved) // 2
    assert all(torch.isfinite(m.lora_B["default_0"].weight).all() for m in live.values())
    assert sum(bool(m.lora_B["default_0"].weight.abs().sum() > 0) for m in live.values()) == len(live)
    return len(live)


def test_demo_config_trains_through_a_drill_samples_and_reloads(tiny, data, tmp_path):
    """The shipped demo.yaml (bf16, its validation), shortened: a NaN loss at step 2 is skipped and changes nothing
    the run writes; the adapter reloads live; the samples are drawn."""
    config = ROOT / "recipes/configs/qwenimage/demo.yaml"
    demo = tmp_path / "demo"
    args = ["--config", str(config), "--skip_doctor", "--pretrained_model_name_or_path", str(tiny),
            "--train_data_dir", str(data), "--output_dir", str(demo / "output"), "--cache_dir", str(demo / "cache"),
            "--resolution", "32", "--max_train_steps", "3", "--validation_steps", "2", "--checkpointing_steps", "0",
            "--report_to", "none", "--inject_faults", "nan_loss@2", "--ignore_memory_plan", "true",
            "--validation_inference_steps", "2"]
    proc = _run(args)
    assert yaml.safe_load(config.read_text())["family"] == "qwenimage"
    out, summary = demo / "output", read_summary(demo / "output")
    assert summary["steps"] == 3 and summary["skipped_steps"] == 1 and summary["applied_updates"] == 2
    assert "caption tokens: the longest cached caption uses" in proc.stdout
    assert _reload_live(tiny, out) > 0
    assert Image.open(out / "samples" / "final_0.png").size == (32, 32)
    assert (out / "samples" / "step2_0.png").is_file()


def test_killed_fp8_run_with_swapped_blocks_resumes_to_the_bytes_of_the_plain_run(tiny, data, tmp_path):
    cache, opts = tmp_path / "cache", {**OPTIONS, "quantize_base": "fp8_scaled", "inject_faults": "nan_loss@2"}
    plain = tmp_path / "plain"
    _run(base_args(tiny, data, plain, cache, **opts))
    out = tmp_path / "swapped"
    swapped = base_args(tiny, data, out, cache, blocks_to_swap=1, **opts)
    _run(swapped, env={"DIT_LORA_FAULT": "micro_batch:3"}, code=137)
    assert not (out / ADAPTER).exists()
    resumed = _run(swapped + ["--resume_from_checkpoint", "latest"])
    assert "checkpoint-2 at step 2" in resumed.stdout, resumed.stdout
    assert read_summary(out)["loss_history"] == read_summary(plain)["loss_history"]
    assert read_summary(plain)["skipped_steps"] == 1 and _file(out) == _file(plain)
    assert _reload_live(tiny, plain) > 0


def test_nf4_base_with_offloaded_activations_skips_a_nan_and_reloads_unquantized(tiny, data, tmp_path):
    out = tmp_path / "out"
    opts = {**OPTIONS, "max_train_steps": 3, "checkpointing_steps": 0, "inject_faults": "nan_loss@2",
            "quantize_base": "nf4", "quantize_text_encoder": "true", "activation_offloading": "true"}
    _run(base_args(tiny, data, out, tmp_path / "cache", **opts))
    summary = read_summary(out)
    assert summary["skipped_steps"] == 1 and summary["applied_updates"] == 2
    assert _reload_live(tiny, out) > 0
