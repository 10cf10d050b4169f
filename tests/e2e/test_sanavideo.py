"""SANA-Video end to end, in the fewest runs: on the tiny text-to-video model an fp8_scaled base with a guard drill
reloaded into the stock SanaVideoPipeline within the base's quantization error, then a run with a swapped block,
killed and resumed bit for bit; on the tiny image-to-video model a run reloaded into the stock
SanaImageToVideoPipeline at the trained model's output; the 2B 480p layout found from its folder, trained and
reloaded.

The two demo configs themselves run in tests/conformance (default flags, bf16, the sync audit)."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from helpers import read_summary, train_in_process
from quantized_reload import capture_steps, reloads_within_quantization_error, skipped_without_change
from safetensors.torch import load_file
from sanavideo_layout import HUB_ID, sanavideo_pipeline
from warm import run_script

pytestmark = [pytest.mark.slow, pytest.mark.filterwarnings("ignore::FutureWarning")]

#: clips of 9 frames at 64 x 64 (3 x 8 x 8 latents), two per batch, no image options
VIDEO = dict(resolution=None, center_crop=None, max_num_frames=9, height=64, width=64, train_batch_size=2,
             mixed_precision="no", gradient_checkpointing="false")


class _Killed(BaseException):
    """The in-process stand-in for a crash point's SIGKILL (nothing after it runs)."""


def _die(code):
    raise _Killed(code)


@pytest.fixture(scope="module")
def tiny(tmp_path_factory) -> Path:
    """The tiny SanaVideoPipeline folder; image-to-video trains and reloads from it too, as the 2B release's one
    checkpoint serves both pipelines."""
    from dit_lora.families.sanavideo.demo import build_tiny_sanavideo_pipeline

    folder = build_tiny_sanavideo_pipeline(tmp_path_factory.mktemp("sanavideo") / "tiny-sanavideo")
    stamp = (folder / "transformer" / "config.json").stat().st_mtime_ns
    assert build_tiny_sanavideo_pipeline(folder) == folder  # idempotent: the marker matches, nothing rewritten
    assert (folder / "transformer" / "config.json").stat().st_mtime_ns == stamp
    return folder


@pytest.fixture(scope="module")
def clips(tmp_path_factory) -> Path:
    from dit_lora.data.synthetic.clips import build_demo_clips

    folder = tmp_path_factory.mktemp("sanavideo-data") / "clips"
    build_demo_clips(folder, n=4, num_frames=9, size=64, fps=16)
    return folder


def _inputs(frames_zero: bool = False) -> dict:
    gen = torch.Generator().manual_seed(0)
    timestep = torch.tensor([300.0, 800.0])
    if frames_zero:  # image-to-video: per-token timesteps, 0 on the first latent frame
        timestep = timestep.view(2, 1, 1, 1, 1).expand(2, 1, 3, 4, 4).clone()
        timestep[:, :, 0] = 0
    return {"hidden_states": torch.randn(2, 16, 3, 8, 8, generator=gen),
            "encoder_hidden_states": torch.randn(2, 7, 48, generator=gen),
            "encoder_attention_mask": torch.ones(2, 7), "timestep": timestep}


def test_t2v_fp8_drill_reloads_then_swapped_killed_and_resumed_bitwise(tiny, clips, tmp_path, monkeypatch):
    """On an fp8_scaled base a NaN batch at update 2 changes nothing and the adapter reloads into the stock fp32
    SanaVideoPipeline (load_lora_weights) within the quantization error; the same run with one of the two blocks
    swapped, killed mid-update 3 and resumed from checkpoint-2, ends with the reference's adapter and losses."""
    from diffusers import SanaVideoPipeline

    from dit_lora.training import drills as hooks

    opts = dict(VIDEO, family="sanavideo", quantize_base="fp8_scaled", max_train_steps=4, checkpointing_steps=2,
                inject_faults="nan_batch@2", lr_scheduler="cosine", lr_warmup_steps=1)
    seen, on_step = capture_steps()
    ref, ref_out = train_in_process(tiny, clips, tmp_path / "ref", on_step=on_step, **opts)
    assert isinstance(ref, dict), ref
    assert ref["family"] == "sanavideo" and ref["skipped_steps"] == 1 and ref["applied_updates"] == 3
    skipped_without_change(seen, 2)
    reloads_within_quantization_error(seen["model"], SanaVideoPipeline, tiny, ref_out, "Fp8ScaledLinear",
                                      **_inputs())

    swapped = dict(opts, blocks_to_swap=1)
    monkeypatch.setenv(hooks.CRASH_VAR, "micro_batch:3")
    monkeypatch.setattr(hooks.os, "_exit", _die)
    with pytest.raises(_Killed):
        train_in_process(tiny, clips, tmp_path / "killed", **swapped)
    monkeypatch.delenv(hooks.CRASH_VAR)
    resumed, out = train_in_process(tiny, clips, tmp_path / "killed", resume_from_checkpoint="latest",
                                    **swapped)
    assert isinstance(resumed, dict), resumed
    assert resumed["steps_this_run"] == 2 and resumed["config"]["blocks_to_swap"] == 1
    a, b = (load_file(str(o / "pytorch_lora_weights.safetensors")) for o in (ref_out, out))
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)
    assert resumed["loss_history"] == ref["loss_history"] and resumed["skipped_steps"] == ref["skipped_steps"]


def test_i2v_reloads_into_the_stock_pipeline_at_the_trained_output(tiny, clips, tmp_path):
    """--family sanavideo_i2v trains on the SanaVideoPipeline folder (the first frame clean), and its adapter,
    loaded into a SanaImageToVideoPipeline from that folder (as diffusers' example loads the 2B release) with diffusers' load_lora_weights, has every LoRA module live and gives the trained
    transformer's output, on per-token timesteps as the pipeline passes them; validation videos (two per prompt) come
    from the in-memory model and from the reloaded pipeline, each animating the first clip's first frame."""
    from diffusers import SanaImageToVideoPipeline

    seen, on_step = capture_steps()
    summary, out = train_in_process(tiny, clips, tmp_path, on_step=on_step, family="sanavideo_i2v",
                                    max_train_steps=2, validation_prompt="a red square", validation_steps=1,
                                    num_validation_images=2, validation_inference_steps=1, **VIDEO)
    assert isinstance(summary, dict), summary
    assert summary["family"] == "sanavideo_i2v" and summary["applied_updates"] == 2
    # two videos of the in-memory model at step 1 and two of the reloaded stock pipeline at the end
    assert sorted(p.name for p in (out / "samples").glob("*.mp4")) == [
        "final_0.mp4", "final_1.mp4", "step1_0.mp4", "step1_1.mp4"]
    model = seen["model"].eval()
    with torch.no_grad():
        trained = model(**_inputs(frames_zero=True)).sample
    pipe = SanaImageToVideoPipeline.from_pretrained(tiny, torch_dtype=torch.float32)
    with torch.no_grad():
        base = pipe.transformer(**_inputs(frames_zero=True)).sample
    pipe.load_lora_weights(out)
    saved = load_file(str(out / "pytorch_lora_weights.safetensors"))
    live = {n: p for n, p in pipe.transformer.named_parameters() if "lora_" in n}
    assert len(live) == len(saved) > 0 and all(p.abs().sum() > 0 for p in live.values())
    with torch.no_grad():
        reloaded = pipe.transformer(**_inputs(frames_zero=True)).sample
    assert (reloaded - base).abs().max() > 1e-6
    torch.testing.assert_close(reloaded, trained, rtol=1e-5, atol=1e-5)


def test_real_layout_is_found_trains_and_reloads(tmp_path):
    """``python -m dit_lora train`` on the 2B 480p layout with no --family: the family from the folder, the
    catalogue's defaults (a reduced depth said), one update on one short clip; the adapter loads into the stock
    SanaVideoPipeline with every LoRA module live and the catalogue's rank."""
    from diffusers import SanaVideoPipeline

    from dit_lora.data.synthetic.clips import build_demo_clips

    model = sanavideo_pipeline(tmp_path / "models")
    data = tmp_path / "data"
    build_demo_clips(data, n=1, num_frames=5, size=64, fps=16)
    script = tmp_path / "python_m_dit_lora.py"
    script.write_text("from dit_lora.commands.cli import main\n\nmain()\n")
    out = tmp_path / "out"
    proc = run_script(script, ["train", "--pretrained_model_name_or_path", model, "--train_data_dir", data,
                               "--output_dir", out, "--cache_dir", tmp_path / "cache", "--max_train_steps", "1",
                               "--report_to", "none", "--mixed_precision", "no", "--max_num_frames", "5",
                               "--height", "64", "--width", "64", "--gradient_checkpointing", "false",
                               "--ignore_memory_plan", "true"],  # the real configs' plan: test_model.py, `dit-lora plan`
                      timeout=600, warm=True)
    text = " ".join(proc.stdout.split())
    assert proc.returncode == 0, (proc.stdout + proc.stderr)[-6000:]
    assert f"has the published config of {HUB_ID}" in text and "num_layers 1 (published: 20)" in text
    summary = read_summary(out)
    assert summary["family"] == "sanavideo" and summary["status"] == "completed" and summary["applied_updates"] == 1
    assert summary["defaults"]["applied"] == {"rank": 16, "lora_alpha": 16, "learning_rate": 1e-4,
                                              "train_batch_size": 1}
    # no text encoder (Gemma-2 at 2304 wide), which the adapter never touches
    pipe = SanaVideoPipeline.from_pretrained(model, torch_dtype=torch.float32, text_encoder=None, tokenizer=None)
    pipe.load_lora_weights(out)
    saved = load_file(str(out / "pytorch_lora_weights.safetensors"))
    live = {n: p for n, p in pipe.transformer.named_parameters() if "lora_" in n}
    assert len(live) == len(saved) > 0 and pipe.transformer.peft_config["default_0"].r == 16
    assert all(torch.isfinite(p).all() for p in live.values())


def test_nf4_base_and_text_encoder_skip_a_nan_and_reload(tiny, clips, tmp_path):
    """--quantize_base nf4 (and the Gemma-2 encoder in nf4): a NaN loss at update 2 changes nothing, and the adapter
    reloads into the stock fp32 SanaVideoPipeline within the base's quantization error."""
    pytest.importorskip("bitsandbytes")
    from diffusers import SanaVideoPipeline

    seen, on_step = capture_steps()
    summary, out = train_in_process(tiny, clips, tmp_path, on_step=on_step, family="sanavideo", quantize_base="nf4",
                                    quantize_text_encoder="true", max_train_steps=3, inject_faults="nan_loss@2",
                                    **VIDEO)
    assert isinstance(summary, dict), summary
    assert summary["skipped_steps"] == 1 and summary["applied_updates"] == 2
    skipped_without_change(seen, 2)
    reloads_within_quantization_error(seen["model"], SanaVideoPipeline, tiny, out, "Linear4bit", **_inputs())
