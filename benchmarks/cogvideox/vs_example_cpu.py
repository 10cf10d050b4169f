#!/usr/bin/env python
"""CPU benchmark: dit-lora's CogVideoX recipe vs diffusers' ``train_cogvideox_lora.py`` on the same work.

    HF_HUB_OFFLINE=1 /path/to/peer-venv/bin/python benchmarks/cogvideox/vs_example_cpu.py --configs tiny,small \
        --compile off,blocks --diffusers_example /tmp/anchors/train_cogvideox_lora.py \
        --out benchmarks/cogvideox/vs_example_cpu.json --markdown /tmp/cogvideox_cpu.md

The work: ``recipes/configs/cogvideox/demo.yaml``'s tiny random CogVideoX (the 5B architecture, RoPE, cut
to width 32 and 2 layers; ``--config small``: width 384 (6 heads x 64) and 4 layers, a compute-bound size),
16 captioned moving-square clips of 9 frames at 64 x 64 (``--size`` for another side), batch 4, LoRA rank 8 /
alpha 8 on to_q, to_k, to_v, to_out.0, AdamW lr 1e-3 (constant with 5 warm-up steps), max_grad_norm 1,
bf16, 226-token T5 captions, latents cached by both, no gradient checkpointing (the example's default; dit-lora's
CogVideoX default is on, so the benchmark turns it off), no validation, no checkpoints.

* ``dit-lora``: ``recipes/cogvideox_lora.py --config recipes/configs/cogvideox/demo.yaml`` + the model and
  data folders; it caches latents *and* caption embeddings before training.
* ``diffusers``: the example on the same clips (``--instance_data_root`` with ``prompts.txt`` /
  ``videos.txt``). It encodes the videos once before training but runs the T5 encoder on the batch's
  captions in every step; the time inside ``T5EncoderModel.forward`` during each step is recorded, and the
  derived row ``diffusers (minus text encoding)`` is its step without that.

The example is not part of this repository (fetch it from huggingface/diffusers,
``examples/cogvideo/train_cogvideox_lora.py``). It imports torchvision and decord, whose wheels do not
import beside this project's CPU torch: run this script (and so both trainers) under the interpreter of an
environment with torch, torchvision, decord, diffusers and dit-lora (``pip install --no-deps -e .``), as the
recorded results were; ``--example_python`` can point the example alone at another interpreter. Timing, the quiet-core checks and the clean-step accounting are
``sana/vs_example_cpu.py``'s (``benchmarks/common/cpu_harness.py``); its summary and table are reused.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from benchmarks.sana.vs_example_cpu import DERIVED, markdown, summarize  # noqa: E402
from benchmarks.common.cpu_harness import child_environment, machine_environment, run_once, wait_for_quiet  # noqa: E402

REPO = Path(__file__).resolve().parents[2]
DEMO_CONFIG = REPO / "recipes" / "configs" / "cogvideox" / "demo.yaml"
RECIPE = REPO / "recipes" / "cogvideox_lora.py"
TEXT_ENCODER_CALL = "transformers.models.t5.modeling_t5:T5EncoderModel.forward"
#: what demo.yaml sets, spelled out for the example
COMMON = {"batch": 4, "rank": 8, "lora_alpha": 8, "learning_rate": 1e-3, "lr_scheduler": "constant_with_warmup",
          "lr_warmup_steps": 5, "max_grad_norm": 1.0, "frames": 9, "fps": 8, "clips": 16, "seed": 0}
#: config -> overrides of the tiny builder's transformer config (None: as built)
CONFIGS = {"tiny": None, "small": {"num_attention_heads": 6, "attention_head_dim": 64, "num_layers": 4}}


def build_assets(work: Path, config: str, size: int, env: dict) -> None:
    """The random pipeline and the clips in both layouts (a child process, so this one stays small)."""
    code = f"""
import sys
from pathlib import Path
sys.path.insert(0, {str(REPO)!r})
from dit_lora.data.synthetic.clips import make_moving_square_dataset
from dit_lora.families.cogvideox.demo import build_tiny_cogvideox_pipeline
work, overrides = Path({str(work)!r}), {CONFIGS[config]!r}
model = work / "models" / {config!r}
if not (model / "model_index.json").exists():
    build_tiny_cogvideox_pipeline(model, version="1.0-5b", seed=0)
    if overrides:
        from diffusers import CogVideoXTransformer3DModel
        import torch
        cfg = dict(CogVideoXTransformer3DModel.load_config(model / "transformer"), **overrides)
        torch.manual_seed(0)
        CogVideoXTransformer3DModel.from_config(cfg).save_pretrained(model / "transformer")
for layout in ("metadata", "txt"):
    make_moving_square_dataset(work / "data" / f"clips{size}-{{layout}}", n={COMMON['clips']},
                               num_frames={COMMON['frames']}, size={size}, fps={COMMON['fps']}, seed=0, layout=layout)
"""
    done = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True)
    if done.returncode != 0:
        raise SystemExit(f"building the model/data failed:\n{done.stdout}\n{done.stderr}")


def dit_lora_cmd(work: Path, config: str, size: int, steps: int, out: Path, compile_mode: str) -> list[str]:
    """The recipe's arguments for one run (demo.yaml's settings on the benchmark's model and clips)."""
    return [str(RECIPE), "--config", str(DEMO_CONFIG), "--demo", "false", "--skip_doctor", "true",
            "--pretrained_model_name_or_path", str(work / "models" / config),
            "--train_data_dir", str(work / "data" / f"clips{size}-metadata"), "--height", str(size), "--width",
            str(size), "--max_num_frames", str(COMMON["frames"]), "--train_batch_size", str(COMMON["batch"]),
            "--mixed_precision", "bf16", "--compile", compile_mode, "--seed", str(COMMON["seed"]),
            # the example's default; dit-lora's CogVideoX default is on (real sizes need it)
            "--gradient_checkpointing", "false",
            "--cache_dir", str(work / "cache" / config), "--output_dir", str(out), "--overwrite_output_dir", "true",
            "--max_train_steps", str(steps), "--checkpointing_steps", "0", "--validation_prompt", "none",
            "--report_to", "none"]


def diffusers_cmd(example: Path, work: Path, config: str, size: int, steps: int, out: Path) -> list[str]:
    """The example's arguments for the same work (its flag names; no checkpoint is reached)."""
    return [str(example), "--pretrained_model_name_or_path", str(work / "models" / config),
            "--instance_data_root", str(work / "data" / f"clips{size}-txt"), "--caption_column", "prompts.txt",
            "--video_column", "videos.txt", "--height", str(size), "--width", str(size),
            "--fps", str(COMMON["fps"]), "--max_num_frames", str(COMMON["frames"]),
            "--train_batch_size", str(COMMON["batch"]), "--max_train_steps", str(steps),
            "--rank", str(COMMON["rank"]), "--lora_alpha", str(COMMON["lora_alpha"]), "--optimizer", "adamw",
            "--learning_rate", str(COMMON["learning_rate"]), "--lr_scheduler", COMMON["lr_scheduler"],
            "--lr_warmup_steps", str(COMMON["lr_warmup_steps"]), "--max_grad_norm", str(COMMON["max_grad_norm"]),
            "--mixed_precision", "bf16", "--seed", str(COMMON["seed"]), "--output_dir", str(out),
            "--checkpointing_steps", str(10 * steps + 1000)]  # never reached: no checkpoints


def main(argv: list[str] | None = None) -> int:
    """Build the assets, run every trainer in interleaved rounds, print and write the summary."""
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--diffusers_example", help="path to diffusers' train_cogvideox_lora.py (optional)")
    ap.add_argument("--example_python", default=sys.executable,
                    help="interpreter of an environment with torch, torchvision, decord and diffusers")
    ap.add_argument("--configs", default="tiny", help=f"comma-separated, of: {', '.join(CONFIGS)}")
    ap.add_argument("--size", type=int, default=64, help="frame side in pixels (a multiple of 16)")
    ap.add_argument("--compile", default="off", help="comma-separated --compile modes for dit-lora")
    ap.add_argument("--steps", type=int, default=60)
    ap.add_argument("--warmup_steps", type=int, default=5)
    ap.add_argument("--repeats", type=int, default=2, help="interleaved rounds")
    ap.add_argument("--work_dir", default=os.path.join(tempfile.gettempdir(), "dit-lora-bench-cogvideox-cpu"))
    ap.add_argument("--out", help="JSON results file")
    ap.add_argument("--markdown", help="also write the summary table here")
    ap.add_argument("--quiet_cores", type=float, default=0.3)
    ap.add_argument("--clean_cores", type=float, default=0.15)
    ap.add_argument("--max_wait_s", type=float, default=20.0)
    ap.add_argument("--min_clean_steps", type=int, default=20)
    args = ap.parse_args(argv)
    work = Path(args.work_dir)
    env = child_environment()  # PYTHONPATH kept, this checkout first: the children run this checkout's code
    env.setdefault("OMP_NUM_THREADS", str(os.cpu_count() or 1))
    configs = args.configs.split(",")
    for config in configs:
        build_assets(work, config, args.size, env)
    runs = []
    for round_ in range(args.repeats):
        for config in configs:
            plans = [("dit-lora" + ("" if mode == "off" else f" compile={mode}"), mode) for mode in
                     args.compile.split(",")]
            plans += [("diffusers", None)] if args.diffusers_example else []
            for variant, mode in plans:
                name = f"{config}-{variant.replace(' ', '_').replace('=', '-')}-r{round_}"
                out = work / "runs" / name
                if mode is None:
                    script = diffusers_cmd(Path(args.diffusers_example), work, config, args.size, args.steps, out)
                    python, call = args.example_python, TEXT_ENCODER_CALL
                    child_env = dict(env, STEP_TIMER_TIME_CALLS=TEXT_ENCODER_CALL)
                else:
                    script = dit_lora_cmd(work, config, args.size, args.steps, out, mode)
                    python, call, child_env = sys.executable, None, env
                print(f"[round {round_}] {name}", flush=True)
                quiet = wait_for_quiet(args.quiet_cores, args.max_wait_s, print)
                result = run_once(name, script, child_env, work / "logs", args.warmup_steps, args.steps, quiet,
                                  args.clean_cores, print, python=python, time_call=call)
                result.update(config=config, variant=variant, resolution=args.size)
                runs.append(result)
    rows = summarize(runs, args.min_clean_steps)
    env_info = machine_environment(env)
    table = markdown(rows, env_info)
    print(table)
    if args.markdown:
        Path(args.markdown).write_text(table + "\n")
    if args.out:
        Path(args.out).write_text(json.dumps({"environment": env_info, "example_python": args.example_python,
                                              "derived_row": DERIVED, "rows": rows, "runs": runs}, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
