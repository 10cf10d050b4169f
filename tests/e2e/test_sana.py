"""End-to-end recipe runs: the embedded demo, and a 2-process run over gloo via accelerate launch."""

from __future__ import annotations

import json
import resource
import shutil
import time

import pytest
import torch
import yaml
from PIL import Image
from safetensors.torch import load_file

from helpers import ROOT, base_args, free_port, read_summary, run_recipe


@pytest.mark.slow
def test_demo_config_trains_reloads_and_reports(tmp_path):
    """The shipped demo.yaml end to end (paths redirected into tmp), well under two minutes on CPU."""
    cfg = yaml.safe_load((ROOT / "recipes/configs/sana/demo.yaml").read_text())
    demo = tmp_path / "demo"
    overrides = {"pretrained_model_name_or_path": demo / "tiny-sana", "train_data_dir": demo / "shapes",
                 "output_dir": demo / "output", "cache_dir": demo / "cache", "report_to": "tensorboard"}
    args = ["--config", str(ROOT / "recipes/configs/sana/demo.yaml"), "--skip_doctor"]
    for k, v in overrides.items():
        args += [f"--{k}", str(v)]
    # The budget is the run's CPU time on one intra-op thread (its wall time on an idle core), not its wall time:
    # the suite runs on 2 pytest-xdist workers, so a shared machine may give this run less than a core.
    start, before = time.time(), resource.getrusage(resource.RUSAGE_CHILDREN)
    proc = run_recipe(args, timeout=400, env={"OMP_NUM_THREADS": "1"})
    after, elapsed = resource.getrusage(resource.RUSAGE_CHILDREN), time.time() - start
    assert proc.returncode == 0, proc.stdout + proc.stderr
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    assert cpu < 120, f"demo took {cpu:.0f} s of CPU ({elapsed:.0f} s wall)"
    out = demo / "output"
    summary = read_summary(out)
    assert summary["steps"] == cfg["max_train_steps"] and summary["skipped_steps"] == 0
    # default flags on a CPU: the step reuses freed host memory, and batches skip the caption padding no caption uses
    if not torch.cuda.is_available():  # the run trains on the CPU here
        assert "host memory: tensors up to 32 MiB come from the heap" in proc.stdout
    assert "caption tokens: the longest cached caption uses" in proc.stdout
    assert summary["samples_seen"] == cfg["max_train_steps"] * cfg["train_batch_size"]
    losses = [l for _, l in summary["loss_history"]]
    assert all(l is not None for l in losses)
    assert sum(losses[-3:]) / 3 < losses[0]  # it learns something
    for key in ("wall_time_s", "steps_per_second", "peak_memory_bytes", "final_loss", "num_processes", "config"):
        assert summary[key] is not None, key
    # Adapter with rank/alpha metadata, finite.
    weights = load_file(str(out / "pytorch_lora_weights.safetensors"))
    assert weights and all(torch.isfinite(v).all() for v in weights.values())
    assert all(k.startswith("transformer.") for k in weights)
    # Final sample generated from a fresh SanaPipeline with load_lora_weights; loss curve; tracker logs.
    final = Image.open(out / "samples" / "final_0.png")
    assert final.size == (cfg["resolution"], cfg["resolution"])
    assert (out / "samples" / "step100_0.png").is_file()
    assert Image.open(out / "loss_curve.png").size[0] > 100
    assert any((out / "logs").rglob("events.out.tfevents*"))
    card = (out / "README.md").read_text()
    assert card.startswith("---") and "library_name: diffusers" in card and "- dit-lora" in card
    assert "- text-to-image" in card and "load_lora_weights" in card and "samples/final_0.png" in card
    # Checkpoints pruned to the limit; the demo prints where everything is.
    assert sorted(p.name for p in out.glob("checkpoint-*")) == ["checkpoint-100", "checkpoint-200"]
    assert "finished:" in proc.stdout and str(out / "pytorch_lora_weights.safetensors") in proc.stdout
    # The card's usage snippet of this config runs as written (the adapter changing the image, and as pushed) in
    # tests/conformance (test_the_card_snippet_runs_and_the_adapter_shows[sana]), on this config's shortened run.


#: the Sana recipe, its planner counted: each call says which rank made it
COUNTED_RECIPE = """
import os, runpy, sys
from dit_lora.training import run_start
_make_plan = run_start.make_plan
def _counted(*args, **kwargs):
    print("planned on rank", os.environ.get("RANK"), flush=True)
    return _make_plan(*args, **kwargs)
run_start.make_plan = _counted
sys.argv[0] = {recipe!r}
runpy.run_path({recipe!r}, run_name="__main__")
"""


@pytest.mark.slow
def test_two_process_gloo_run(tmp_path, tiny_sana, shapes_data):
    """Two processes over gloo (accelerate's launcher); the memory plan is made once, by rank 0, and holds for both."""
    from warm_launch import launch

    out = tmp_path / "out"
    options = ["--multi_gpu", "--num_processes", "2", "--num_machines", "1", "--mixed_precision", "bf16",
               "--dynamo_backend", "no", "--main_process_port", str(free_port())]
    args = base_args(tiny_sana, shapes_data, out, tmp_path / "cache", max_train_steps=4, checkpointing_steps=2,
                     random_flip="true", ignore_memory_plan="false")
    script = tmp_path / "counted_sana.py"
    script.write_text(COUNTED_RECIPE.format(recipe=str(ROOT / "recipes" / "sana_lora.py")))
    proc = launch(options, script, args, env={"CUDA_VISIBLE_DEVICES": ""}, timeout=400, via="accelerate")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert proc.stdout.count("planned on rank") == 1 and "planned on rank 0" in proc.stdout, proc.stdout
    summary = read_summary(out)
    assert summary["memory_plan"] is not None and summary["memory_plan"]["family"] == "sana"
    assert summary["num_processes"] == 2 and summary["steps"] == 4
    assert summary["samples_seen"] == 4 * 4 * 2
    ckpt = out / "checkpoint-4"
    states = [json.loads((ckpt / f"trainer_state_rank{r}.json").read_text()) for r in (0, 1)]
    assert states[0]["rng"]["generator"] != states[1]["rng"]["generator"]  # each rank draws its own noise
    weights = load_file(str(out / "pytorch_lora_weights.safetensors"))
    assert all(torch.isfinite(v).all() for v in weights.values())
    # The checkpoint at the last step and the final adapter hold the same weights (PEFT vs diffusers names),
    # the adapter with lora_alpha / rank folded into lora_B.
    config = summary["config"]
    scale = config["lora_alpha"] / config["rank"] if config["lora_alpha"] else 1.0
    trained = load_file(str(ckpt / "trainable_weights.safetensors"))
    assert len(trained) == len(weights)
    for name, value in trained.items():
        expected = (value.double() * scale).to(value.dtype) if ".lora_B." in name else value
        assert torch.equal(weights["transformer." + name.replace(".default.", ".")], expected), name


@pytest.mark.slow
def test_corrupt_sample_is_skipped_and_named(tmp_path, tiny_sana, shapes_data):
    data = tmp_path / "data"
    shutil.copytree(shapes_data, data)
    (data / "broken.png").write_bytes(b"\x89PNG\r\n\x1a\n" + b"garbage" * 10)
    with open(data / "metadata.jsonl", "a") as fh:
        fh.write(json.dumps({"file_name": "broken.png", "text": "a broken image"}) + "\n")
    out = tmp_path / "out"
    proc = run_recipe(base_args(tiny_sana, data, out, tmp_path / "cache", max_train_steps=2, max_bad_samples_fraction=0.1),
                      warm=True)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "broken.png" in proc.stdout
    assert read_summary(out)["steps"] == 2
    # Past the tolerated fraction the run stops with one paragraph naming the flag.
    proc = run_recipe(base_args(tiny_sana, data, tmp_path / "out2", tmp_path / "cache", max_bad_samples_fraction=0.01),
                      warm=True)
    text = " ".join((proc.stdout + proc.stderr).split())
    assert proc.returncode == 2 and "--max_bad_samples_fraction" in text and "Traceback" not in text


@pytest.mark.slow
def test_uncached_path_encodes_on_the_fly(tmp_path, tiny_sana, shapes_data):
    """--cache_latents false: VAE and text encoder stay loaded and encode each batch; nothing is cached."""
    out, cache = tmp_path / "out", tmp_path / "cache"
    proc = run_recipe(base_args(tiny_sana, shapes_data, out, cache, max_train_steps=3, cache_latents="false",
                                random_flip="true", validation_prompt="a red circle", validation_steps=2,
                                num_validation_images=1, validation_inference_steps=2), warm=True)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    summary = read_summary(out)
    assert summary["steps"] == 3 and summary["final_loss"] is not None
    assert not cache.exists() or not any(cache.rglob("*.safetensors"))
    assert (out / "samples" / "step2_0.png").is_file() and (out / "samples" / "final_0.png").is_file()


@pytest.mark.slow
def test_mixed_aspect_images_train_in_their_buckets(tmp_path, tiny_sana, mixed_aspect_data):
    """--aspect_buckets auto (the default) on 4:1, 1:4, 3:1, 1:3, 3:2, 2:3 and square images: each is cached at its
    bucket, batches keep to one bucket, the bucket table is logged once, samples stay the --resolution square."""
    from dit_lora.data.aspect import aspect_buckets, bucket_of, format_size

    sizes = [Image.open(p).size for p in sorted(mixed_aspect_data.glob("*.png"))]
    assert len({round(w / h, 2) for w, h in sizes}) >= 6

    out, cache = tmp_path / "out", tmp_path / "cache"
    proc = run_recipe(base_args(tiny_sana, mixed_aspect_data, out, cache, max_train_steps=4, train_batch_size=2,
                                random_flip="true", ignore_memory_plan="false", validation_prompt="a red circle",
                                validation_steps=4, num_validation_images=1, validation_inference_steps=2),
                      warm=True)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    from dit_lora.families.sana.model import resolution_multiple

    # the model's stride from its configs: DC-AE compression x patch size (the tiny model's DC-AE compresses 8x)
    configs = [json.loads((tiny_sana / c / "config.json").read_text()) for c in ("transformer", "vae")]
    stride = resolution_multiple(*configs)[1]
    buckets = aspect_buckets(64 * 64, stride)
    chosen = [bucket_of(w, h, buckets) for w, h in sizes]
    assert proc.stdout.count(f"images per bucket (--aspect_buckets auto: {len(buckets)} aspect-ratio buckets of at "
                             f"most 64x64 pixels in steps of {stride}") == 1
    table = [line.split() for line in proc.stdout.splitlines()]
    for bucket in {b for b, _ in chosen}:
        n = sum(b == bucket for b, _ in chosen)
        assert [format_size(bucket), str(n), f"{n / len(chosen):.1%}"] in table
    over = sum(share > 0.10 for _, share in chosen)  # the line is printed only when an image loses more than 10%
    assert (f"{over} image(s) lose more than 10% of their area" in proc.stdout) if over else (
        "lose more than 10%" not in proc.stdout)
    assert "memory plan: predicted peak" in proc.stdout
    shapes = sorted(tuple(load_file(str(f))["latents"].shape[-2:]) for f in cache.rglob("*.safetensors"))
    assert shapes == sorted((h // stride, w // stride) for (h, w), _ in chosen)
    assert read_summary(out)["steps"] == 4
    assert Image.open(out / "samples" / "final_0.png").size == (64, 64)  # sampling keeps the --resolution square
