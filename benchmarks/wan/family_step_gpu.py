#!/usr/bin/env python
"""The Wan family's own train step on a GPU: ``dit-lora``'s loop (guard, fused AdamW, no host sync) training
``--family wan`` on a Wan 2.1 checkpoint laid out as the Hub has it, real architecture, random weights.

    python benchmarks/wan/family_step_gpu.py --out results.json                       # 1.3B, 81x480x832
    python benchmarks/wan/family_step_gpu.py --model Wan-AI/Wan2.2-T2V-A14B-Diffusers --layers 2 \\
        --extra "--wan_expert both"                                                    # the expert swap on CUDA
    python benchmarks/wan/family_step_gpu.py --smoke                                  # CPU: tiny, checks the script

What it measures, next to ``wan/step_gpu.py`` (the bare transformer step): everything the family adds per step
(its loss, the step number's expert choice, dit-lora's guard and optimizer) on the same inputs: 81 x 480 x 832,
batch 1, LoRA rank 32 on ``to_q,to_k,to_v,to_out.0`` (the bare benchmark's targets), gradient checkpointing on
(the family's default). The folder comes from ``tests/support/real_layout.wan_pipeline``: published configs, the
transformer at full depth (``--layers`` cuts it), a narrow VAE and a one-layer UMT5 (they only build the cache).
Clips: moving squares (``dit_lora.data.synthetic.clips``). Time per step: median gap between consecutive updates after the
warm-up (the loop never waits for the device, so the gaps average to the device's pace); peak memory and loss from
the run's ``train_summary.json``.
"""

from __future__ import annotations

import argparse
import json
import shlex
import statistics
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "tests" / "support"))


def build(root: Path, model: str, layers: int | None, frames: int, size: int) -> tuple[Path, Path]:
    """The Hub-layout folder and a clip folder under ``root``."""
    from real_layout import wan_pipeline

    from dit_lora.data.synthetic.clips import make_moving_square_dataset
    from dit_lora.families.wan.catalogue import ENTRIES

    entry = next(e for e in ENTRIES if e.hub_id == model)
    depth = layers or entry.configs["transformer/config.json"]["num_layers"]
    folder = wan_pipeline(root, model, layers=depth)
    clips = make_moving_square_dataset(root / "clips", n=4, num_frames=frames, size=size, fps=16, seed=0)
    return folder, clips


def run(folder: Path, clips: Path, out: Path, args) -> dict:
    """Train in this process; return the step gaps and the summary."""
    import torch

    from dit_lora.commands.recipe import parse_run
    from dit_lora.training.loop import train

    argv = ["--pretrained_model_name_or_path", str(folder), "--train_data_dir", str(clips), "--output_dir", str(out),
            "--max_train_steps", str(args.steps), "--max_num_frames", str(args.frames), "--height", str(args.height),
            "--width", str(args.width), "--rank", str(args.rank), "--lora_alpha", str(args.rank),
            "--lora_layers", "to_q", "to_k", "to_v", "to_out.0", "--train_batch_size", "1", "--report_to", "none",
            "--checkpointing_steps", "0", "--seed", "0", *shlex.split(args.extra)]
    cfg = parse_run(argv, "wan")
    stamps: list[float] = []
    train(cfg, on_step=lambda step, model, opt: stamps.append(time.perf_counter()))
    if torch.cuda.is_available():
        torch.cuda.synchronize()
    summary = json.loads((out / "train_summary.json").read_text())
    gaps = [b - a for a, b in zip(stamps, stamps[1:])][args.warmup:]
    return {"gaps": gaps, "summary": summary}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default="Wan-AI/Wan2.1-T2V-1.3B-Diffusers")
    ap.add_argument("--layers", type=int, default=None, help="Transformer depth (default: the published one).")
    ap.add_argument("--frames", type=int, default=81)
    ap.add_argument("--height", type=int, default=480)
    ap.add_argument("--width", type=int, default=832)
    ap.add_argument("--rank", type=int, default=32)
    ap.add_argument("--steps", type=int, default=14)
    ap.add_argument("--warmup", type=int, default=3, help="Step gaps left out of the median.")
    ap.add_argument("--extra", default="", help="More training flags, one string.")
    ap.add_argument("--out", default=None)
    ap.add_argument("--smoke", action="store_true", help="CPU: 1 layer, 5x64x64, 3 steps; checks the script.")
    args = ap.parse_args()
    import torch

    if args.smoke:
        args.layers, args.frames, args.height, args.width, args.steps, args.warmup, args.rank = 1, 5, 64, 64, 3, 0, 4
        args.extra = (args.extra + " --mixed_precision no").strip()
    elif not torch.cuda.is_available():
        print("wan/family_step_gpu.py: no CUDA device (use --smoke on a CPU).", file=sys.stderr)
        return 2
    with tempfile.TemporaryDirectory() as tmp:
        folder, clips = build(Path(tmp), args.model, args.layers, args.frames, max(args.height, args.width) // 2)
        result = run(folder, clips, Path(tmp) / "out", args)
    s = result["summary"]
    row = {"model": args.model, "layers": args.layers, "size": [args.frames, args.height, args.width],
           "rank": args.rank, "extra": args.extra, "steps": s["steps"],
           "median_s_per_step": round(statistics.median(result["gaps"]), 4) if result["gaps"] else None,
           "peak_memory_gib": s.get("peak_memory_gib"), "final_loss": s.get("final_loss"),
           "skipped_steps": s.get("skipped_steps"), "device": s.get("device"),
           "predicted_peak_gib": round(s["memory_plan"]["peak_memory_bytes"] / 2**30, 2) if s.get("memory_plan") else None}
    print(json.dumps(row, indent=1))
    if args.out:
        Path(args.out).write_text(json.dumps(row, indent=1))
    if args.smoke:
        assert row["steps"] == args.steps and row["skipped_steps"] == 0, row
        print("smoke test passed (CPU, tiny: no numbers to report)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
