#!/usr/bin/env python
"""Time per file of ``dit-lora caption``: the command's own path (listing, decoding on threads, prompt building,
batched greedy generation, atomic writes and the journal) on each video-LLM family.

    python benchmarks/videollm/caption.py --out benchmarks/videollm/caption_cpu.json     # tiny models, this CPU
    python benchmarks/videollm/caption.py --device cuda --model /models/Qwen2.5-VL-7B-Instruct --quantize_base nf4
    python benchmarks/videollm/caption.py --smoke      # checks the script; records nothing

Without ``--model`` each family's tiny offline model (random weights, two layers: ``build_demo_model``) captions a
folder of ``--images`` images (three sizes) and ``--clips`` 8-frame clips, fp32, ``--max_new_tokens`` with
``min_new_tokens`` forced to the same (every caption equally long: random weights end at random points); with tiny
models the figure is the command's overhead, not a model's compute. With ``--model`` that model (a local folder)
captions the same folder in bf16 (or ``--quantize_base``) on ``--device``. Each row: files per second over the
whole command after the model is loaded, at batch 1 and at ``--batch_size``.
"""

from __future__ import annotations

import argparse
import json
import platform
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

FAMILIES = ("llava_next_video", "qwen2_5_vl", "internvl", "qwen3_vl", "qwen3_vl_moe")


def make_folder(root: Path, images: int, clips: int) -> Path:
    """``images`` random images of three sizes and ``clips`` 8-frame moving-square clips."""
    import numpy as np
    from PIL import Image

    from dit_lora.data.synthetic.clips import write_moving_square_clip

    rng = np.random.default_rng(0)
    root.mkdir(parents=True, exist_ok=True)
    for i in range(images):
        size = ((240, 320), (320, 240), (256, 256))[i % 3]
        Image.fromarray(rng.integers(0, 256, (*size, 3), dtype=np.uint8)).save(root / f"img{i:03d}.jpg")
    for i in range(clips):
        write_moving_square_clip(root / f"clip{i:03d}.mp4", color="red", direction="left to right", num_frames=8,
                                 size=64)
    return root


def time_run(folder: Path, model: str, args, batch_size: int) -> dict:
    """Caption ``folder`` afresh with ``model``; files per second after loading (the load timed apart)."""
    import torch

    from dit_lora.captioning import run as run_module
    from dit_lora.captioning.options import CaptionOptions

    for stale in [*folder.glob("*.txt"), folder / ".dit-lora-captions.jsonl"]:
        stale.unlink(missing_ok=True)
    loaded = {}
    original = run_module.load_captioner

    def timed_load(*a, **k):
        start = time.perf_counter()
        captioner = original(*a, **k)
        captioner.model.generation_config.min_new_tokens = args.max_new_tokens  # every caption as long
        loaded.update(seconds=time.perf_counter() - start, at=time.perf_counter())
        return captioner

    run_module.load_captioner = timed_load
    try:
        options = CaptionOptions(path=folder, model=model, max_new_tokens=args.max_new_tokens, batch_size=batch_size,
                                 num_frames=8, mixed_precision="no" if args.device == "cpu" else "bf16",
                                 quantize_base=args.quantize_base, device=args.device).resolved()
        outcome = run_module.caption_folder(options)
        if args.device == "cuda":
            torch.cuda.synchronize()
        seconds = time.perf_counter() - loaded["at"]
    finally:
        run_module.load_captioner = original
    files = len(outcome.written)
    return {"batch_size": batch_size, "files": files, "failed": len(outcome.failed), "load_s": round(loaded["seconds"], 2),
            "caption_s": round(seconds, 2), "files_per_s": round(files / seconds, 2)}


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--device", default="cpu", choices=("cpu", "cuda"))
    parser.add_argument("--model", default=None, help="a local video-LLM folder (default: each tiny family)")
    parser.add_argument("--quantize_base", default=None, choices=("nf4", "int8", "fp8", "fp8_scaled"))
    parser.add_argument("--images", type=int, default=24)
    parser.add_argument("--clips", type=int, default=8)
    parser.add_argument("--max_new_tokens", type=int, default=32)
    parser.add_argument("--batch_size", type=int, default=4)
    parser.add_argument("--out", type=Path, default=None)
    parser.add_argument("--smoke", action="store_true", help="one family, 3 images and 1 clip; records nothing")
    args = parser.parse_args(argv)
    if args.smoke:
        args.images, args.clips, args.max_new_tokens, args.batch_size = 3, 1, 4, 2
    import torch

    from dit_lora.families.videollm.spec import build_demo_model

    work = Path(tempfile.mkdtemp(prefix="dit-lora-caption-bench-"))
    folder = make_folder(work / "data", args.images, args.clips)
    models = {"model": args.model} if args.model else {
        family: str(build_demo_model(family, work / family)) for family in (FAMILIES[1:2] if args.smoke else FAMILIES)}
    rows = []
    for name, model in models.items():
        for batch in sorted({1, args.batch_size}):
            row = {"captioner": name, **time_run(folder, model, args, batch)}
            rows.append(row)
            print(json.dumps(row), flush=True)
    if args.smoke:
        ok = all(r["files"] == args.images + args.clips and r["failed"] == 0 for r in rows)
        print("smoke test passed" if ok else "smoke test FAILED", flush=True)
        return 0 if ok else 1
    device = torch.cuda.get_device_name() if args.device == "cuda" else platform.processor() or platform.machine()
    record = {"device": device, "torch": torch.__version__, "threads": torch.get_num_threads(),
              "command": "python " + " ".join(["benchmarks/videollm/caption.py", *(argv or sys.argv[1:])]),
              "images": args.images, "clips": args.clips, "max_new_tokens": args.max_new_tokens, "rows": rows}
    if args.out:
        args.out.write_text(json.dumps(record, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
