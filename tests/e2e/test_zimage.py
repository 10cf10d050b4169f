"""Z-Image end to end, in the fewest runs: the Hub layout found, trained and reloaded; on the tiny model a guard
drill, the levers (fp8_scaled, blocks_to_swap, nf4) and a killed run resumed bit for bit; the adapter reloaded into
the stock unquantized ZImagePipeline at the trained model's output, up to the base's quantization error.

The demo config itself runs in tests/conformance (default flags, bf16, the sync audit) and the guide's
command in tests/test_guides.py."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file
from warm import run_script
from zimage_layout import BASE, TURBO, turbo_beside, zimage_pipeline

from helpers import read_summary, train_in_process
from quantized_reload import assert_quantization_error_only, capture_steps, skipped_without_change

pytestmark = [pytest.mark.slow, pytest.mark.filterwarnings("ignore::FutureWarning")]


class _Killed(BaseException):
    """The in-process stand-in for a crash point's SIGKILL (nothing after it runs)."""


def _die(code):
    raise _Killed(code)


@pytest.fixture(scope="module")
def tiny_zimage(tmp_path_factory) -> Path:
    from dit_lora.families.zimage.demo import build_tiny_zimage_pipeline

    return build_tiny_zimage_pipeline(tmp_path_factory.mktemp("zimage") / "tiny-zimage")


@pytest.fixture(scope="module")
def four_shapes(tmp_path_factory) -> Path:
    from dit_lora.data.synthetic.shapes import make_shapes_dataset

    return make_shapes_dataset(tmp_path_factory.mktemp("zimage-data") / "shapes", n=4, size=64, seed=0)


def _inputs(seed: int = 0) -> dict:
    gen = torch.Generator().manual_seed(seed)
    return {"x": [torch.randn(4, 1, 16, 16, generator=gen) for _ in range(2)], "t": torch.tensor([0.2, 0.9]),
            "cap_feats": [torch.randn(5, 48, generator=gen), torch.randn(9, 48, generator=gen)]}


def _output(model) -> torch.Tensor:
    with torch.no_grad():
        return torch.stack(model(**_inputs(), return_dict=False)[0]).float()


def _reloaded_within_quantization_error(model, model_dir: Path, out: Path, layer: str) -> None:
    """The adapter, put on the unquantized fp32 ZImagePipeline by diffusers' load_lora_weights with every LoRA
    module live, gives the trained quantized model's output up to the base's quantization error."""
    from diffusers import ZImagePipeline

    model = model.eval()
    assert type(model.layers[0].attention.to_q.base_layer).__name__ == layer
    trained = _output(model)
    model.disable_adapters()
    base_q = _output(model)
    model.enable_adapters()
    pipe = ZImagePipeline.from_pretrained(model_dir, torch_dtype=torch.float32)
    base = _output(pipe.transformer)
    pipe.load_lora_weights(out)
    saved = load_file(str(out / "pytorch_lora_weights.safetensors"))
    live = {n: p for n, p in pipe.transformer.named_parameters() if "lora_" in n}
    assert len(live) == len(saved) > 0 and all(p.abs().sum() > 0 for p in live.values())
    assert_quantization_error_only(trained, _output(pipe.transformer), base_q, base)


def test_fp8_scaled_drill_then_swapped_offloaded_killed_and_resumed_bitwise(tiny_zimage, four_shapes, tmp_path,
                                                                         monkeypatch):
    """Three short runs: on an fp8_scaled base, a NaN batch at update 2 changes nothing and the adapter reloads
    (reference); the same run with one of the two main layers swapped and the blocks' saved activations offloaded,
    killed mid-update 3 and resumed from checkpoint-2, ends with the reference's adapter and losses bit for bit (the
    swap, the offloading and the resume change no value)."""
    from dit_lora.training import drills as hooks

    opts = dict(family="zimage", quantize_base="fp8_scaled", mixed_precision="no", train_batch_size=2,
                max_train_steps=4, checkpointing_steps=2, inject_faults="nan_batch@2", max_sequence_length=32,
                gradient_checkpointing="false", lr_scheduler="cosine", lr_warmup_steps=1)
    seen, on_step = capture_steps()
    ref, ref_out = train_in_process(tiny_zimage, four_shapes, tmp_path / "ref", on_step=on_step, **opts)
    assert isinstance(ref, dict), ref
    assert ref["family"] == "zimage" and ref["skipped_steps"] == 1 and ref["applied_updates"] == 3
    skipped_without_change(seen, 2)
    _reloaded_within_quantization_error(seen["model"], tiny_zimage, ref_out, "Fp8ScaledLinear")

    swapped = dict(opts, blocks_to_swap=1, activation_offloading="true")
    monkeypatch.setenv(hooks.CRASH_VAR, "micro_batch:3")
    monkeypatch.setattr(hooks.os, "_exit", _die)
    with pytest.raises(_Killed):
        train_in_process(tiny_zimage, four_shapes, tmp_path / "killed", **swapped)
    monkeypatch.delenv(hooks.CRASH_VAR)
    resumed, out = train_in_process(tiny_zimage, four_shapes, tmp_path / "killed", resume_from_checkpoint="latest",
                                    **swapped)
    assert isinstance(resumed, dict), resumed
    assert resumed["steps_this_run"] == 2 and resumed["config"]["blocks_to_swap"] == 1
    assert resumed["config"]["activation_offloading"] is True
    a, b = (load_file(str(o / "pytorch_lora_weights.safetensors")) for o in (ref_out, out))
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)
    assert resumed["loss_history"] == ref["loss_history"] and resumed["skipped_steps"] == ref["skipped_steps"]


def test_nf4_base_and_text_encoder_skip_a_nan_and_reload(tiny_zimage, four_shapes, tmp_path):
    pytest.importorskip("bitsandbytes")
    seen, on_step = capture_steps()
    summary, out = train_in_process(tiny_zimage, four_shapes, tmp_path, on_step=on_step, family="zimage",
                                    quantize_base="nf4", quantize_text_encoder="true", mixed_precision="no",
                                    train_batch_size=2, max_train_steps=3, inject_faults="nan_loss@2",
                                    max_sequence_length=32, gradient_checkpointing="false")
    assert isinstance(summary, dict), summary
    assert summary["skipped_steps"] == 1 and summary["applied_updates"] == 2
    skipped_without_change(seen, 2)
    _reloaded_within_quantization_error(seen["model"], tiny_zimage, out, "Linear4bit")


@pytest.fixture(scope="module")
def layouts(tmp_path_factory) -> tuple[Path, Path]:
    """Z-Image and Z-Image-Turbo as the Hub lays them out (one build: Turbo's folder links the base's weights)."""
    base = zimage_pipeline(tmp_path_factory.mktemp("zimage-layouts"))
    return base, turbo_beside(base)


def test_real_layout_is_found_trains_and_reloads(layouts, tmp_path, capsys):
    """``python -m dit_lora train`` on the base layout: the family from the folder, the catalogue's defaults, one
    update at 128 px; the adapter loads into the stock ZImagePipeline with every LoRA module live. Turbo's folder
    is told apart by its scheduler and warned about; ``dit-lora models`` lists both."""
    from diffusers import ZImagePipeline

    from dit_lora.catalogue import match
    from dit_lora.catalogue.defaults import config_reader
    from dit_lora.commands import cli
    from dit_lora.data.synthetic.shapes import make_shapes_dataset
    from dit_lora.registry import get_spec
    from zimage_layout import zimage_cfg

    base, turbo = layouts
    script = tmp_path / "python_m_dit_lora.py"
    script.write_text("from dit_lora.commands.cli import main\n\nmain()\n")
    data = make_shapes_dataset(tmp_path / "data", n=1, size=128, seed=0)
    out = tmp_path / "out"
    proc = run_script(script, ["train", "--pretrained_model_name_or_path", base, "--train_data_dir", data,
                               "--output_dir", out, "--cache_dir", tmp_path / "cache", "--max_train_steps", "1",
                               "--report_to", "none", "--mixed_precision", "no", "--resolution", "128",
                               "--gradient_accumulation_steps", "1", "--gradient_checkpointing", "false"],
                      timeout=600, warm=True)
    text = " ".join(proc.stdout.split())
    assert proc.returncode == 0, (proc.stdout + proc.stderr)[-6000:]
    assert f"has the published config of {BASE}" in text
    assert "except n_layers 1 (published: 30), n_refiner_layers 1 (published: 2)" in text
    summary = read_summary(out)
    assert summary["family"] == "zimage" and summary["status"] == "completed" and summary["applied_updates"] == 1
    assert summary["defaults"]["applied"] == {"rank": 4, "lora_alpha": 4, "learning_rate": 1e-4, "train_batch_size": 1,
                                              "validation_inference_steps": 50, "validation_guidance_scale": 5.0}
    # no text encoder (Qwen3 at 2560 wide), which the adapter never touches
    pipe = ZImagePipeline.from_pretrained(base, torch_dtype=torch.float32, text_encoder=None, tokenizer=None)
    pipe.load_lora_weights(out)
    saved = load_file(str(out / "pytorch_lora_weights.safetensors"))
    live = {n: p for n, p in pipe.transformer.named_parameters() if "lora_" in n}
    assert len(live) == len(saved) > 0 and pipe.transformer.peft_config["default_0"].r == 4
    assert all(torch.isfinite(p).all() for p in live.values())

    cfg = zimage_cfg(pretrained_model_name_or_path=str(turbo))
    assert match("zimage", config_reader(cfg.model)).hub_id == TURBO
    assert "step-distilled" in get_spec("zimage").notes.start_notes(cfg)[0]
    with pytest.raises(SystemExit) as done:
        cli.main(["models", "--family", "zimage"])
    assert done.value.code == 0
    listed = capsys.readouterr().out
    assert BASE in listed and TURBO in listed
