"""``--compile`` through the real recipes: zero graph breaks and zero recompiles after warm-up across two frame
buckets and a rollback, the compiled run equal to the eager one up to float reassociation, a killed compiled run
resumed bit for bit (from a checkpoint whose next batch is the other bucket), and every family's capture.

Inductor's C++ build is what costs here (about a minute the first time on 2 cores; later processes hit its
on-disk cache), so inductor's generated code is checked on CogVideoX, the family with buckets; the other
families' graph capture (breaks, recompiles, regions) is checked with dynamo's ``aot_eager`` backend, the
same capture without code generation.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

from helpers import base_args, read_summary, run_recipe, train_in_process

# Two frame buckets, batch 1, a NaN streak at updates 2-3 that rolls back at update 4 (guard checks every 2),
# kernel checks (eager steps) at 1, 3 and 6, LoRA dropout (torch's generator: fallback_random), checkpoints at 4 and 8.
COMPILED = dict(compile="blocks", frame_buckets="9x64x64,5x64x64", train_batch_size=1, max_train_steps=8,
                checkpointing_steps=4, inject_faults="nan_loss@2-3", max_consecutive_skips=2,
                kernel_check_interval=3, lora_dropout=0.1)


def _args(model: Path, data: Path, out: Path, **overrides) -> list[str]:
    opts = {"pretrained_model_name_or_path": model, "train_data_dir": data, "output_dir": out,
            "cache_dir": out.parent / "cache", "rank": 4, "lora_alpha": 8, "learning_rate": 1e-3,
            "report_to": "none", "skip_doctor": "true", "seed": 0, "ignore_memory_plan": "true",
            "mixed_precision": "no", **COMPILED, **overrides}
    return [x for k, v in opts.items() if v is not None for x in (f"--{k}", str(v))]


@pytest.fixture(scope="module")
def two_buckets(tmp_path_factory) -> Path:
    """4 clips of 9 frames and 4 of 5 frames: two bucket shapes."""
    from dit_lora.data.synthetic.clips import make_moving_square_dataset

    root = tmp_path_factory.mktemp("compile-clips")
    data = make_moving_square_dataset(root / "mixed", n=4, num_frames=9, seed=4)
    short = make_moving_square_dataset(root / "short", n=4, num_frames=5, seed=5)
    lines = (data / "metadata.jsonl").read_text().splitlines()
    for line in (short / "metadata.jsonl").read_text().splitlines():
        row = json.loads(line)
        shutil.copy(short / row["file_name"], data / ("short_" + row["file_name"]))
        lines.append(json.dumps({"file_name": "short_" + row["file_name"], "text": row["text"]}))
    (data / "metadata.jsonl").write_text("\n".join(lines) + "\n")
    return data


@pytest.fixture(scope="module")
def reference(tmp_path_factory, tiny_cogvideox, two_buckets) -> Path:
    out = tmp_path_factory.mktemp("compile-ref") / "out"
    proc = run_recipe(_args(tiny_cogvideox, two_buckets, out), recipe="cogvideox", timeout=600, warm=True)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert "compile: --compile blocks, 2 compiled region(s)" in proc.stdout
    return out


def _assert_no_recompiles(summary: dict, shapes: int) -> None:
    compiled = summary["compile"]
    assert compiled["mode"] == "blocks" and compiled["graph_breaks"] == 0, compiled
    assert compiled["batch_shapes"] == shapes and compiled["recompiles_after_warmup"] == 0, compiled
    assert compiled["graphs"] >= shapes and len(compiled["steps_that_compiled"]) == shapes, compiled


@pytest.mark.slow
@pytest.mark.xdist_group("compile-cogvideox")  # one reference run per worker
def test_two_buckets_and_a_rollback_compile_once_per_shape(reference):
    summary = read_summary(reference)
    _assert_no_recompiles(summary, shapes=2)
    # what the setting is for: a rollback happened, and check steps (eager) fell between compiled ones
    assert summary["rollbacks"] == 1 and summary["rollback_events"][0]["step"] == 4 and summary["skipped_steps"] == 2
    assert summary["kernels"]["checks"] == 3 and summary["status"] == "completed"
    compiled_steps = set(summary["compile"]["steps_that_compiled"])
    assert not compiled_steps & {1, 3, 6}  # check steps run eagerly and compile nothing


@pytest.mark.slow
@pytest.mark.xdist_group("compile-cogvideox")  # one reference run per worker
def test_compiled_training_matches_eager_up_to_reassociation(reference, tiny_cogvideox, two_buckets, tmp_path):
    out = tmp_path / "eager"
    proc = run_recipe(_args(tiny_cogvideox, two_buckets, out, compile="off"), recipe="cogvideox", timeout=600,
                      warm=True)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert read_summary(out)["compile"] is None
    compiled, eager = (load_file(str(o / "pytorch_lora_weights.safetensors")) for o in (reference, out))
    assert compiled.keys() == eager.keys()
    moved = [(eager[k] - compiled[k]).abs().max() / eager[k].abs().max().clamp_min(1e-12) for k in eager]
    assert max(moved) < 1e-3, max(moved)  # the same training, summed in another order
    assert any(not torch.equal(compiled[k], eager[k]) for k in eager)  # and really compiled (not eager again)


@pytest.mark.slow
@pytest.mark.xdist_group("compile-cogvideox")  # one reference run per worker
def test_a_killed_compiled_run_resumes_bit_for_bit(reference, tiny_cogvideox, two_buckets, tmp_path):
    """Killed mid-update 6 and resumed from checkpoint-4: the resumed process compiles its shapes in another
    order than the reference did, and still computes the same bits (one static graph per shape)."""
    out = tmp_path / "out"
    killed = run_recipe(_args(tiny_cogvideox, two_buckets, out), recipe="cogvideox", timeout=600,
                        env={"DIT_LORA_FAULT": "micro_batch:6"}, warm=True)
    assert killed.returncode != 0 and not (out / "pytorch_lora_weights.safetensors").exists()
    resumed = run_recipe(_args(tiny_cogvideox, two_buckets, out, resume_from_checkpoint="latest"),
                         recipe="cogvideox", timeout=600, warm=True)
    assert resumed.returncode == 0, resumed.stdout[-3000:] + resumed.stderr[-3000:]
    summary = read_summary(out)
    assert summary["steps_this_run"] == 4
    _assert_no_recompiles(summary, shapes=2)
    a, b = (load_file(str(o / "pytorch_lora_weights.safetensors")) for o in (reference, out))
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)


# ---- every family's capture (aot_eager: dynamo without inductor's C++ build) -----------------------------
@pytest.fixture
def aot_eager(monkeypatch):
    from dit_lora.training import compile as compile_mod

    monkeypatch.setattr(compile_mod, "BACKEND", "aot_eager")


@pytest.mark.slow
def test_sana_compiles_without_breaks(aot_eager, tiny_sana, shapes_data, tmp_path):
    mode = "blocks"
    summary, _ = train_in_process(tiny_sana, shapes_data, tmp_path, compile=mode, max_train_steps=3,
                                  kernel_check_interval=3, inject_faults="nan_loss@2", resolution=32,
                                  train_batch_size=2)
    assert not isinstance(summary, Exception), summary
    compiled = summary["compile"]
    assert compiled["mode"] == mode and compiled["graph_breaks"] == 0 and compiled["recompiles_after_warmup"] == 0
    assert compiled["regions"] == 2 and compiled["steps_that_compiled"] == [2]
    assert summary["skipped_steps"] == 1 and summary["final_loss"] is not None


@pytest.fixture(scope="module")
def three_aspects(tmp_path_factory, shapes_data) -> Path:
    """Six captioned shape images, two of each of three aspect ratios (4:1, 1:4, 3:2): at batch 2 an epoch is one
    full batch of each bucket, so the second epoch meets every shape again."""
    from PIL import Image

    root = tmp_path_factory.mktemp("three-aspects")
    rows = [json.loads(line) for line in (shapes_data / "metadata.jsonl").read_text().splitlines()]
    lines = []
    for i, ((width, height), row) in enumerate(zip([(200, 50), (50, 200), (96, 64)] * 2, rows)):
        name = f"{i:02d}_{width}x{height}.png"
        Image.open(shapes_data / row["file_name"]).convert("RGB").resize((width, height)).save(root / name)
        lines.append(json.dumps({"file_name": name, "text": row["text"]}))
    (root / "metadata.jsonl").write_text("\n".join(lines) + "\n")
    return root


@pytest.mark.slow
def test_sana_compiles_one_graph_per_aspect_bucket(aot_eager, tiny_sana, three_aspects, tmp_path):
    """Mixed-aspect images (--aspect_buckets auto): one static graph per batch shape met, no break, no recompile after
    warm-up (the recompile limit is sized by the buckets). Three buckets over two epochs: each shape's graphs are
    compiled once (every compile traces the whole block; ~6 s of CPU a shape here), and the second epoch's steps
    after each shape's first compiled one run the graphs already made."""
    import torch._dynamo

    # Dynamo's own limit (8 graphs of one block's code) would hold this run's 6 (3 shapes x 2 grad variants) unsized;
    # at 1 the run compiles every shape only if --compile sizes the limit by the buckets.
    # (config.patch, not monkeypatch: pytest's undo deletes a torch config entry, hiding it from every later test)
    with torch._dynamo.config.patch(recompile_limit=1):
        summary, _ = train_in_process(tiny_sana, three_aspects, tmp_path, compile="blocks", max_train_steps=6,
                                      resolution=64, train_batch_size=2)
    assert not isinstance(summary, Exception), summary
    compiled = summary["compile"]
    assert compiled["graph_breaks"] == 0 and compiled["recompiles_after_warmup"] == 0, compiled
    assert compiled["batch_shapes"] == 3, compiled  # the three buckets, each a full batch of 2
    # step 1 is a kernel check (eager): each shape compiles on its first compiled step only, so of the 5 compiled
    # steps 2 run graphs made before
    assert len(compiled["steps_that_compiled"]) == 3 and compiled["graphs"] >= 3, compiled


@pytest.mark.slow
def test_dit_compiles_whole_without_breaks(aot_eager, tiny_dit, shape_classes, tmp_path):
    """--compile full (the whole model) on DiT; --compile blocks is covered by the other families' tests."""
    summary, _ = train_in_process(tiny_dit, shape_classes, tmp_path, compile="full", max_train_steps=3,
                                  family="dit", num_classes=3)
    assert not isinstance(summary, Exception), summary
    compiled = summary["compile"]
    assert compiled["mode"] == "full" and compiled["regions"] == 1, compiled
    assert compiled["graph_breaks"] == 0 and compiled["recompiles_after_warmup"] == 0, compiled


@pytest.mark.slow
@pytest.mark.parametrize("family", ["llava_next_video", "qwen2_5_vl"])
def test_video_llm_serves_every_sequence_length_with_one_compile(aot_eager, tmp_path, family):
    """Answers of different lengths make every batch a new shape: dynamic shapes compile once.

    Batch 1: Qwen2.5-VL's language model drops an all-ones mask (transformers decides that inside), so with
    batches > 1 the first batch with padding after one without costs one more compile (reported as such).
    """
    from accelerate.state import AcceleratorState

    from dit_lora.config import parse_config
    from dit_lora.families.videollm.demo_clips import make_qa_dataset
    from dit_lora.families.videollm.demo_qwen import build_tiny_qwen2_5_vl
    from dit_lora.families.videollm.demo_llava import build_tiny_llava_next_video
    from dit_lora.training.loop import train

    build = build_tiny_llava_next_video if family == "llava_next_video" else build_tiny_qwen2_5_vl
    model = build(tmp_path / "tiny-model")
    data = make_qa_dataset(tmp_path / "chat", n=4, num_frames=4, layout="chat", seed=1)
    qa_file = data  # make_qa_dataset returns the annotation file
    data = qa_file.parent
    rows = [json.loads(line) for line in qa_file.read_text().splitlines()]
    for i, row in enumerate(rows):
        row["messages"][1]["content"] += " and" * (3 * i)  # four different lengths
    qa_file.write_text("\n".join(json.dumps(r) for r in rows) + "\n")
    # a video LLM reads no latent cache, resolution or crop: given, they are refused (config/applies.py)
    args = base_args(model, data, tmp_path / "out", None, resolution=None, center_crop=None,
                     train_batch_size=1, max_train_steps=4, num_frames=4, compile="blocks",
                     family=family, attention_canary="false")
    AcceleratorState._reset_state(True)
    try:
        summary = train(parse_config(args))
    finally:
        AcceleratorState._reset_state(True)
    compiled = summary["compile"]
    assert compiled["dynamic_shapes"] and compiled["batch_shapes"] == 4, compiled
    assert compiled["steps_that_compiled"] == [1] and compiled["recompiles_after_warmup"] == 0, compiled
    assert compiled["graph_breaks"] == 0, compiled


@pytest.mark.slow
def test_wan_compiles_blocks_once_per_bucket_and_matches_eager(aot_eager, two_buckets, tmp_path):
    """Wan 2.1 T2V, --compile blocks over two frame buckets (9 and 5 frames: 3 and 2 latent frames) with a NaN drill:
    no graph break, one compile per shape and none after, and the adapter equal to the eager run's within float
    tolerance (aot_eager: dynamo's capture and AOT autograd without inductor's code generation)."""
    from dit_lora.families.wan.demo import build_tiny_wan_pipeline

    model = build_tiny_wan_pipeline(tmp_path / "tiny-wan", variant="2.1-t2v", layers=2)  # blocks: 2 or more
    opts = dict(family="wan", resolution=None, center_crop=None, frame_buckets="9x64x64,5x64x64", train_batch_size=1,
                max_train_steps=6, inject_faults="nan_loss@2", kernel_check_interval=4, lora_dropout=0.1,
                mixed_precision="no")
    summary, out = train_in_process(model, two_buckets, tmp_path / "compiled", compile="blocks", **opts)
    assert isinstance(summary, dict), summary
    _assert_no_recompiles(summary, shapes=2)
    assert summary["compile"]["regions"] == 2  # the two WanTransformerBlocks
    assert summary["skipped_steps"] == 1 and summary["kernels"]["checks"] >= 1
    eager, eager_out = train_in_process(model, two_buckets, tmp_path / "eager", compile="off", **opts)
    assert isinstance(eager, dict) and eager["compile"] is None, eager
    compiled, plain = (load_file(str(o / "pytorch_lora_weights.safetensors")) for o in (out, eager_out))
    assert compiled.keys() == plain.keys() and compiled
    moved = [(plain[k] - compiled[k]).abs().max() / plain[k].abs().max().clamp_min(1e-12) for k in plain]
    assert max(moved) < 1e-3, max(moved)
    losses = [[loss for _, loss in s["loss_history"]] for s in (eager, summary)]
    assert losses[0] and losses[0] == pytest.approx(losses[1], rel=1e-3)


@pytest.mark.slow
@pytest.mark.parametrize("family", ["lumina2", "zimage"])
def test_caption_length_families_compile_once_for_captions_of_every_length(aot_eager, family, tmp_path):
    """Lumina 2's and Z-Image's blocks see the captions' tokens beside the image's (Z-Image's padded to a multiple of
    32): four captions of four lengths, one a batch, compile once (dynamic shapes, ``FamilyInfo.compile_dynamic``;
    static ones compile again for each new length), with no graph break."""
    from accelerate.state import AcceleratorState

    from dit_lora.config import parse_config
    from dit_lora.data.synthetic.shapes import make_shapes_dataset
    from dit_lora.families.lumina2.demo import build_tiny_lumina2_pipeline
    from dit_lora.families.zimage.demo import build_tiny_zimage_pipeline
    from dit_lora.training.loop import train

    build = {"lumina2": build_tiny_lumina2_pipeline, "zimage": build_tiny_zimage_pipeline}[family]
    model = build(tmp_path / f"tiny-{family}")
    data = make_shapes_dataset(tmp_path / "data", n=4, size=64, seed=0)
    rows = [json.loads(line) for line in (data / "metadata.jsonl").read_text().splitlines()]
    for i, row in enumerate(rows):
        row["text"] += " with a square" * (12 * i)  # four lengths, 36 or more tokens apart
    (data / "metadata.jsonl").write_text("\n".join(json.dumps(r) for r in rows) + "\n")
    args = base_args(model, data, tmp_path / "out", tmp_path / "cache", train_batch_size=1, max_train_steps=4,
                     compile="blocks", max_sequence_length=256, attention_canary="false", family=family)
    AcceleratorState._reset_state(True)
    try:
        summary = train(parse_config(args))
    finally:
        AcceleratorState._reset_state(True)
    compiled = summary["compile"]
    assert compiled["dynamic_shapes"] and compiled["regions"] == 4, compiled  # 2 layers + 1 + 1 refiner blocks
    assert compiled["steps_that_compiled"] == [1] and compiled["recompiles_after_warmup"] == 0, compiled
    assert compiled["graph_breaks"] == 0, compiled
