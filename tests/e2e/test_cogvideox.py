"""CogVideoX through the recipe: T2V and I2V end to end on both data layouts, bad clips, buckets, two processes."""

from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path

import pytest
import torch
from safetensors import safe_open
from safetensors.torch import load_file

from helpers import free_port, read_summary, run_recipe

pytestmark = pytest.mark.filterwarnings("ignore::FutureWarning")


@pytest.fixture(scope="module")
def models(tmp_path_factory, tiny_cogvideox) -> dict[str, Path]:
    from dit_lora.families.cogvideox.demo import build_tiny_cogvideox_pipeline

    root = tmp_path_factory.mktemp("cogvideox-models")
    return {
        "t2v": tiny_cogvideox,  # shared with tests/e2e/test_quantized_base.py
        "t2v-2b": build_tiny_cogvideox_pipeline(root / "t2v-2b", task="t2v", version="1.0-2b"),
        "i2v-1.5": build_tiny_cogvideox_pipeline(root / "i2v-15", task="i2v", version="1.5"),
    }


@pytest.fixture(scope="module")
def clip_sets(tmp_path_factory) -> dict[str, Path]:
    """The same 12 clips in the metadata layout and in the prompts.txt/videos.txt layout (+ bad clips)."""
    from dit_lora.data.synthetic.clips import make_moving_square_dataset, write_corrupt_clip, write_truncated_clip

    root = tmp_path_factory.mktemp("clips")
    meta = make_moving_square_dataset(root / "meta", n=12, num_frames=9, seed=3, layout="metadata")
    txt = root / "txt"
    shutil.copytree(meta, txt)
    rows = [json.loads(line) for line in (meta / "metadata.jsonl").read_text().splitlines()]
    (txt / "metadata.jsonl").unlink()
    # The txt layout also lists a corrupt clip, one cut short and one with 5 frames (< 9): all quarantined.
    write_corrupt_clip(txt / "broken.mp4")
    write_truncated_clip(meta / rows[0]["file_name"], txt / "cut.mp4", keep=0.4)
    make_moving_square_dataset(root / "short", n=1, num_frames=5, seed=9)
    shutil.copy(root / "short" / "clip_00000.mp4", txt / "short.mp4")
    names = [r["file_name"] for r in rows] + ["broken.mp4", "cut.mp4", "short.mp4"]
    prompts = [r["text"] for r in rows] + ["a broken clip", "a clip cut short", "a short clip"]
    (txt / "videos.txt").write_text("\n".join(names) + "\n")
    (txt / "prompts.txt").write_text("\n".join(prompts) + "\n")
    # Mixed lengths for buckets: 8 clips of 9 frames and 6 of 5 frames.
    mixed = make_moving_square_dataset(root / "mixed", n=8, num_frames=9, seed=4)
    make_moving_square_dataset(root / "mixed5", n=6, num_frames=5, seed=5)
    lines = (mixed / "metadata.jsonl").read_text().splitlines()
    for line in (root / "mixed5" / "metadata.jsonl").read_text().splitlines():
        row = json.loads(line)
        shutil.copy(root / "mixed5" / row["file_name"], mixed / ("short_" + row["file_name"]))
        lines.append(json.dumps({"file_name": "short_" + row["file_name"], "text": row["text"]}))
    (mixed / "metadata.jsonl").write_text("\n".join(lines) + "\n")
    return {"meta": meta, "txt": txt, "mixed": mixed}


def _args(model: Path, data: Path, out: Path, cache: Path, **overrides) -> list[str]:
    opts = {
        "pretrained_model_name_or_path": model, "train_data_dir": data, "output_dir": out, "cache_dir": cache,
        "max_num_frames": 9, "height": 64, "width": 64, "rank": 4, "lora_alpha": 8, "train_batch_size": 2,
        "max_train_steps": 6, "learning_rate": 1e-3, "checkpointing_steps": 6, "report_to": "none",
        "skip_doctor": "true", "seed": 0, "validation_inference_steps": 2, "num_validation_images": 1,
        # fp32 halves these CPU runs (bf16 matmuls are slow on a CPU); the 2B test and the demo configs
        # (tests/conformance) keep the bf16 default.
        "mixed_precision": "no",
        # The start-of-run memory plan (~10 s a run on 2 cores) has its own tests, and every family's demo run
        # (tests/conformance) still plans; see helpers.base_args.
        "ignore_memory_plan": "true",
    }
    opts.update(overrides)
    return [x for k, v in opts.items() if v is not None for x in (f"--{k}", str(v))]


def _decode(path: Path) -> tuple[int, int, int]:
    import av

    with av.open(str(path)) as container:
        frames = [f for f in container.decode(video=0)]
    return len(frames), frames[0].height, frames[0].width


def _lora_of(pipe) -> dict[str, torch.Tensor]:
    return {n: p.detach().float() for n, p in pipe.transformer.named_parameters() if "lora_" in n}


@pytest.mark.slow
def test_t2v_metadata_layout_end_to_end_and_reload(models, clip_sets, tmp_path):
    """Train, write an MP4 from the reloaded adapter; the adapter holds exactly the trained weights."""
    from diffusers import CogVideoXPipeline

    out, cache = tmp_path / "out", tmp_path / "cache"
    proc = run_recipe(_args(models["t2v"], clip_sets["meta"], out, cache, validation_prompt="a red square moving up"),
                      recipe="cogvideox", warm=True)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert ("video size: 9x64x64 (frames x height x width) from --height/--width/--max_num_frames; the checkpoint "
            "was trained at 9x64x64") in proc.stdout  # the tiny model's own recorded size
    summary = read_summary(out)
    assert summary["status"] == "completed" and summary["steps"] == 6 and summary["family"] == "cogvideox"
    assert summary["gradient_checkpointing"] is True  # the family's default
    assert summary["peak_memory_bytes"] > 0 and summary["peak_memory_gib"] > 0
    assert [Path(p).suffix for p in summary["samples"]] == [".mp4"]
    assert _decode(Path(summary["samples"][0])) == (9, 64, 64)
    with safe_open(str(out / "pytorch_lora_weights.safetensors"), framework="pt") as fh:
        meta = json.loads(fh.metadata()["lora_adapter_metadata"])  # diffusers' key, prefixed by component
    assert meta["transformer.r"] == 4 and meta["transformer.lora_alpha"] == 4  # alpha 8 / rank 4 folded into B
    # The consumer's own loader restores exactly the weights the run ended with (checkpoint-6, unfolded: resuming
    # from it continues the same run), lora_B times alpha / rank = 2, at scale 1.0.
    trained = load_file(str(out / "checkpoint-6" / "trainable_weights.safetensors"))
    pipe = CogVideoXPipeline.from_pretrained(models["t2v"])
    pipe.load_lora_weights(out)
    loaded = _lora_of(pipe)
    assert len(loaded) == len(trained) > 0
    assert pipe.transformer.transformer_blocks[0].attn1.to_q.scaling == {"default_0": 1.0}
    for name, value in trained.items():
        key = name.replace(".default.", ".default_0.")
        assert torch.equal(loaded[key], value.float() * (2 if ".lora_B." in name else 1)), name
    card = " ".join((out / "README.md").read_text().split())
    assert "Load it at scale 1.0: the trained LoRA scale alpha / rank = 2 (rank 4, alpha 8) is folded" in card
    card = (out / "README.md").read_text()
    assert "av.VideoFrame.from_image" in card and "load_lora_weights" in card and "text-to-video" in card
    # A second run on the same data reuses every cached clip.
    again = run_recipe(_args(models["t2v"], clip_sets["meta"], tmp_path / "out2", cache, max_train_steps=1,
                             checkpointing_steps=0), recipe="cogvideox", warm=True)
    assert again.returncode == 0, again.stderr[-3000:]
    assert "12/12 samples already cached" in again.stdout


@pytest.mark.slow
def test_i2v_15_txt_layout_quarantines_bad_clips(models, clip_sets, tmp_path):
    """I2V on the 1.5 architecture (latent padding, ofs) from prompts.txt/videos.txt with bad clips listed."""
    out = tmp_path / "out"
    proc = run_recipe(_args(models["i2v-1.5"], clip_sets["txt"], out, tmp_path / "cache", family="cogvideox_i2v",
                            caption_column="prompts.txt", video_column="videos.txt", max_bad_samples_fraction=0.3,
                            validation_prompt="a green square moving left to right", kernels="on",
                            max_train_steps=1), recipe="cogvideox", warm=True)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    summary = read_summary(out)
    assert summary["status"] == "completed" and summary["family"] == "cogvideox_i2v"
    # The fused ops trained this run's step (with gradient checkpointing) and passed the first step's check (a step
    # costs ~15 s in Triton's CPU interpreter; the checks at an interval are test_kernels_training.py's).
    kernels = summary["kernels"]
    assert kernels["patched"]["modulate"] == 4 and kernels["patched"]["attention"] == 2
    assert kernels["checks"] == 1 and kernels["fallbacks"] == [] and summary["skipped_steps"] == 0
    quarantine = {q["key"]: q["reason"] for q in json.loads((out / "quarantine.json").read_text())}
    assert set(quarantine) == {"broken.mp4", "cut.mp4", "short.mp4"}
    assert "too short" in quarantine["short.mp4"] and "not a readable video" in quarantine["broken.mp4"]
    frames, height, width = _decode(Path(summary["samples"][0]))
    assert (frames, height, width) == (9, 64, 64)  # the pipeline drops the padded latent frame again
    import av

    with av.open(summary["samples"][0]) as container:
        assert float(container.streams.video[0].average_rate) == 16  # CogVideoX 1.5 plays at 16 fps


@pytest.mark.slow
def test_2b_uncached_logit_normal_capped_and_fault_skipped(models, clip_sets, tmp_path):
    """2B (sin-cos positions), no cache, logit-normal timesteps, capped weights; an injected NaN is skipped."""
    out = tmp_path / "out"
    proc = run_recipe(_args(models["t2v-2b"], clip_sets["meta"], out, tmp_path / "cache", cache_latents="false",
                            timestep_sampling="logit_normal", loss_weight_cap=20, inject_faults="nan_loss@3",
                            gradient_checkpointing="false", mixed_precision=None), recipe="cogvideox",
                      warm=True)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    summary = read_summary(out)
    assert summary["skipped_steps"] == 1 and summary["nonfinite_losses"] == 1 and summary["applied_updates"] == 5
    assert summary["gradient_checkpointing"] is False
    assert not (tmp_path / "cache").exists()  # nothing was cached


@pytest.mark.slow
def test_two_buckets_on_two_processes(models, clip_sets, tmp_path):
    """9- and 5-frame clips in their own buckets, two gloo processes: batches never mix shapes, ranks agree."""
    out = tmp_path / "out"
    launcher = [sys.executable, "-m", "accelerate.commands.launch", "--multi_gpu", "--num_processes", "2",
                "--num_machines", "1", "--mixed_precision", "bf16", "--dynamo_backend", "no", "--main_process_port",
                str(free_port())]
    proc = run_recipe(_args(models["t2v"], clip_sets["mixed"], out, tmp_path / "cache", max_num_frames=None,
                            height=None, width=None, frame_buckets="9x64x64,5x64x64", train_batch_size=1,
                            max_train_steps=4, checkpointing_steps=0, kernels="on"),
                      recipe="cogvideox", launcher=launcher, timeout=400, warm=True)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    summary = read_summary(out)
    assert summary["num_processes"] == 2 and summary["steps"] == 4 and summary["status"] == "completed"
    assert summary["kernels"]["checks"] == 1 and summary["kernels"]["fallbacks"] == []  # agreed across ranks
    assert summary["kernels"]["patched"]["modulate"] == 4 and summary["kernels"]["patched"]["layernorm"] > 0
    assert "bucket" in proc.stdout  # the clips-per-bucket line


@pytest.mark.parametrize(
    "case, overrides, needles",
    [
        ("i2v checkpoint, t2v family", {"model": "i2v-1.5"}, ["--family cogvideox_i2v"]),
        ("t2v checkpoint, i2v family", {"family": "cogvideox_i2v"}, ["--family cogvideox"]),
        ("frames not 4k+1", {"max_num_frames": 8}, ["--max_num_frames 8", "9"]),
        ("size not /16", {"height": 60}, ["--height", "64"]),
        ("far from the trained size", {"height": 512, "width": 512},
         ["--height/--width/--max_num_frames asks for 9x512x512", "9x64x64", "--allow_untrained_resolution"]),
        ("buckets and frames", {"frame_buckets": "9x64x64"}, ["--frame_buckets", "--max_num_frames"]),
        ("prompts/videos mismatch", {"data": "mismatch"}, ["prompts.txt", "videos.txt"]),
    ],
)
@pytest.mark.slow
def test_bad_input_ends_in_one_paragraph(models, clip_sets, tmp_path, case, overrides, needles):
    data = clip_sets["meta"]
    extra: dict = {}
    if overrides.pop("data", None) == "mismatch":
        data = tmp_path / "mismatch"
        shutil.copytree(clip_sets["txt"], data)
        (data / "prompts.txt").write_text("\n".join((data / "prompts.txt").read_text().splitlines()[:-2]) + "\n")
        extra = {"caption_column": "prompts.txt", "video_column": "videos.txt"}
    model = models[overrides.pop("model", "t2v")]
    proc = run_recipe(_args(model, data, tmp_path / "out", tmp_path / "cache", **extra, **overrides),
                      recipe="cogvideox", timeout=120, warm=True)
    assert proc.returncode == 2, (case, proc.stdout[-2000:], proc.stderr[-2000:])
    assert "Traceback" not in proc.stderr, case
    text = " ".join(proc.stderr.split())  # the paragraph is wrapped at 100 columns
    for needle in needles:
        assert needle in text, (case, needle, proc.stderr[-2000:])
