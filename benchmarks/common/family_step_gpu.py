#!/usr/bin/env python
"""A family's own train step on a GPU: ``dit-lora``'s loop (guard, fused AdamW, no host sync) training a checkpoint
laid out as the Hub has it, real architecture and depth, random weights.

    python benchmarks/common/family_step_gpu.py --family flux --out flux.json          # FLUX.1 [dev], 1024 px
    python benchmarks/common/family_step_gpu.py --family flux --extra "--quantize_base fp8_scaled"   # the 24 GB answer
    python benchmarks/common/family_step_gpu.py --family wan --out wan.json            # Wan 2.1 1.3B, 81x480x832
    python benchmarks/common/family_step_gpu.py --family wan --model Wan-AI/Wan2.2-T2V-A14B-Diffusers --layers 2 \\
        --extra "--wan_expert both"                                                    # the expert swap on CUDA
    python benchmarks/common/family_step_gpu.py --family ltx2 --extra "--quantize_base fp8_scaled ..."  # LTX-2 + sound
    python benchmarks/common/family_step_gpu.py --family hunyuanvideo15 --extra "--quantize_base fp8_scaled ..."  # 8.3B
    python benchmarks/common/family_step_gpu.py --family flux --smoke                  # CPU: tiny, checks the script

What it measures, next to the bare transformer steps (``sana/step_gpu.py``, ``wan/step_gpu.py``): everything the
family adds per step (its loss, dit-lora's guard and optimizer), with the family's defaults (LoRA rank and targets,
gradient checkpointing) unless ``--extra`` says otherwise. The folders come from the tests' layout builders
(``tests/support``): published configs, the transformer at full depth (``--layers`` cuts it), a narrow VAE and
one-layer text encoders (they only build the cache). Data: moving squares for video families
(``dit_lora.data.synthetic.clips``), smooth random images for image families. Time per step: median gap between
consecutive updates after the warm-up (the loop never waits for the device, so the gaps average to the device's
pace); peak memory, the plan's prediction, this process's peak resident memory (the build excluded with
``--folder``) and the loss from the run's ``train_summary.json``. ``--folder`` reuses a
folder built earlier (``--build_only``), so that several settings share one build.
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

#: family -> (default checkpoint, video?, default size: frames, height, width)
FAMILIES = {
    "wan": ("Wan-AI/Wan2.1-T2V-1.3B-Diffusers", True, (81, 480, 832)),
    "flux": ("black-forest-labs/FLUX.1-dev", False, (1, 1024, 1024)),
    "chroma": ("lodestones/Chroma1-HD", False, (1, 1024, 1024)),
    "ltx2": ("Lightricks/LTX-2", True, (121, 512, 768)),
    "hunyuanvideo15": ("hunyuanvideo-community/HunyuanVideo-1.5-Diffusers-480p_t2v", True, (121, 480, 848)),
}
#: the clips' frame rate and sound per video family (LTX-2 trains its audio: each clip gets a tone)
CLIPS = {"wan": (16, "none"), "ltx2": (24, "tones"), "hunyuanvideo15": (24, "none")}


def build_folder(root: Path, family: str, model: str, layers: int | None, narrow: bool = False) -> Path:
    """The Hub-layout folder of ``model`` under ``root``, its transformer at the published depth or ``layers``
    (``narrow``: Wan's text encoder layer narrowed inside, its model width kept, for a CPU smoke: the published
    layer over 512 tokens was most of one)."""
    from dit_lora.catalogue import by_hub_id

    config = by_hub_id(model).configs["transformer/config.json"]
    if family == "wan":
        from real_layout import wan_pipeline

        return wan_pipeline(root, model, layers=layers or config["num_layers"], narrow_text_encoder=narrow)
    if family == "ltx2":
        from ltx2_layout import ltx2_pipeline

        return ltx2_pipeline(root, model, layers=layers)
    if family == "hunyuanvideo15":
        from hunyuanvideo15_layout import hunyuanvideo15_pipeline

        return hunyuanvideo15_pipeline(root, model, layers=layers or config["num_layers"])
    from flux_layout import chroma_pipeline, dev_pipeline

    double, single = config["num_layers"], config["num_single_layers"]
    depth = (layers, 2 * layers) if layers else (double, single)
    return (dev_pipeline if family == "flux" else chroma_pipeline)(root, depth=depth)


def build_data(root: Path, family: str, frames: int, height: int, width: int) -> Path:
    """Four training examples at the asked size: clips for a video family (with a tone each where the family trains
    sound), images for an image family."""
    if FAMILIES[family][1]:
        from dit_lora.data.synthetic.clips import make_moving_square_dataset

        fps, sound = CLIPS[family]
        return make_moving_square_dataset(root / "clips", n=4, num_frames=frames, size=max(height, width) // 2,
                                          fps=fps, seed=0, sound=sound)
    import numpy as np
    from PIL import Image

    folder = root / "images"
    folder.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(0)
    for i in range(4):
        small = rng.integers(0, 256, (8, 8, 3), dtype=np.uint8)
        Image.fromarray(small).resize((width, height), Image.BICUBIC).save(folder / f"{i}.png")
        (folder / f"{i}.txt").write_text(f"a smooth colour field, number {i}")
    return folder


def run(family: str, folder: Path, data: Path, out: Path, args) -> dict:
    """Train in this process; return the step gaps and the summary."""
    import torch

    from dit_lora.commands.recipe import parse_run
    from dit_lora.training.loop import train

    size = (["--max_num_frames", str(args.frames), "--height", str(args.height), "--width", str(args.width)]
            if FAMILIES[family][1] else ["--resolution", str(args.height)])
    argv = ["--pretrained_model_name_or_path", str(folder), "--train_data_dir", str(data), "--output_dir", str(out),
            "--max_train_steps", str(args.steps), *size, "--train_batch_size", "1", "--report_to", "none",
            "--checkpointing_steps", "0", "--seed", "0", *shlex.split(args.extra)]
    cfg = parse_run(argv, family)
    stamps: list[float] = []
    train(cfg, on_step=lambda step, model, opt: stamps.append(time.perf_counter()))
    if torch.cuda.is_available():
        torch.cuda.synchronize()
    summary = json.loads((out / "train_summary.json").read_text())
    gaps = [b - a for a, b in zip(stamps, stamps[1:])][args.warmup:]
    return {"gaps": gaps, "summary": summary}


def _row(args, result: dict) -> dict:
    """The result file's row: the settings, the median step, the run's memory and the plan's prediction."""
    import resource

    s, plan = result["summary"], result["summary"].get("memory_plan") or {}
    gib = {k: round(v / 2**30, 2) for k, v in plan.items() if k.endswith("_bytes") and isinstance(v, (int, float))}
    return {"family": args.family, "model": args.model, "layers": args.layers,
            "size": [args.frames, args.height, args.width], "extra": args.extra, "steps": s["steps"],
            "median_s_per_step": round(statistics.median(result["gaps"]), 4) if result["gaps"] else None,
            "peak_memory_gib": s.get("peak_memory_gib"), "final_loss": s.get("final_loss"),
            "skipped_steps": s.get("skipped_steps"), "device": s.get("device"), "plan_gib": gib,
            "host_peak_rss_gib": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20, 2)}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--family", choices=sorted(FAMILIES), default="wan")
    ap.add_argument("--model", default=None, help="Catalogued checkpoint (default: the family's first).")
    ap.add_argument("--layers", type=int, default=None, help="Transformer depth (default: the published one).")
    ap.add_argument("--frames", type=int, default=None)
    ap.add_argument("--height", type=int, default=None)
    ap.add_argument("--width", type=int, default=None)
    ap.add_argument("--steps", type=int, default=14)
    ap.add_argument("--warmup", type=int, default=3, help="Step gaps left out of the median.")
    ap.add_argument("--extra", default="", help="More training flags, one string.")
    ap.add_argument("--folder", default=None, help="A folder built by an earlier --build_only (reused as is).")
    ap.add_argument("--build_only", default=None, help="Build the checkpoint folder under this path and stop.")
    ap.add_argument("--out", default=None)
    ap.add_argument("--smoke", action="store_true", help="CPU: 1 layer, tiny sizes, 3 steps; checks the script.")
    args = ap.parse_args()
    model, video, (frames, height, width) = FAMILIES[args.family]
    args.model = args.model or model
    args.frames, args.height, args.width = args.frames or frames, args.height or height, args.width or width
    import torch

    if args.build_only:
        print(build_folder(Path(args.build_only), args.family, args.model, args.layers))
        return 0
    if args.smoke:
        args.layers, args.steps, args.warmup = 1, 3, 0
        args.frames, args.height, args.width = (9 if args.family == "ltx2" else 5, 64, 64) if video else (1, 64, 64)
        # a short caption for an image family: T5's 512 tokens over 3072-wide blocks were most of a CPU smoke
        args.extra = (args.extra + " --mixed_precision no" + (" --rank 4" if video else " --max_sequence_length 16")
                      + (" --max_sequence_length 128" if args.family == "ltx2" else ""))
        args.extra = args.extra.strip()
    elif not torch.cuda.is_available():
        print("common/family_step_gpu.py: no CUDA device (use --smoke on a CPU).", file=sys.stderr)
        return 2
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(args.folder) if args.folder else build_folder(Path(tmp), args.family, args.model, args.layers,
                                                                          narrow=args.smoke)
        data = build_data(Path(tmp), args.family, args.frames, args.height, args.width)
        row = _row(args, run(args.family, folder, data, Path(tmp) / "out", args))
    print(json.dumps(row, indent=1))
    if args.out:
        Path(args.out).write_text(json.dumps(row, indent=1))
    if args.smoke:
        assert row["steps"] == args.steps and row["skipped_steps"] == 0, row
        print("smoke test passed (CPU, tiny: no numbers to report)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
