"""The memory plan against the peaks measured on a GPU by the train-step benchmarks.

``sana/step_gpu.py``, ``cogvideox/step_gpu.py`` and ``videollm/step_gpu.py`` measured
``max_memory_allocated`` of dit-lora's own step (the family's ``compute_loss``, LoRA with fp32 masters,
fused AdamW, clipping) on an H100; their results files hold each setting. A ``step_gpu_h200.json`` beside one
replaces its rows of the same settings (Sana and CogVideoX re-measured on an H200 with the model built in bf16:
the H100 run's build in fp32 set three of its peaks). This script plans the same
settings on this machine (no GPU needed: the plan loads no weight) and prints both. The benchmarks load
only the trained model (no encoders, synthetic cached inputs) and take no rollback snapshot, so the
compared figure is the plan's model weights + optimizer moments + the step's activations and gradients.

    python benchmarks/plan/vs_gpu.py > table.md
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
#: benchmarks/, whose family folders hold the GPU step results this compares against
BENCH = Path(__file__).resolve().parents[1]
GIB = 2**30

#: the benchmarks' architectures are the catalogue's configs of these releases
SANA = {"600M": "Efficient-Large-Model/Sana_600M_1024px_diffusers",
        "1600M": "Efficient-Large-Model/Sana_1600M_1024px_BF16_diffusers"}
COGVIDEOX = {"2b": "THUDM/CogVideoX-2b", "5b": "THUDM/CogVideoX-5b"}
LLAVA = "llava-hf/LLaVA-NeXT-Video-7B-hf"


def _plan(family_name: str, hub_id: str, **options):
    from dit_lora.catalogue import by_hub_id
    from dit_lora.catalogue.defaults import config_reader
    from dit_lora.config import TrainConfig
    from dit_lora.plan import plan_run
    from dit_lora.registry import get_family

    cfg = TrainConfig.for_family(family=family_name, pretrained_model_name_or_path=hub_id, **options)
    return plan_run(cfg, get_family(family_name), config_reader(cfg.model), device="cuda",
                    catalogue_entry=by_hub_id(hub_id).hub_id)


def comparable(plan, checkpointing: bool) -> int:
    """What the benchmark held: the trained model, AdamW's moments, the step (no encoders, no snapshot)."""
    step = max(s.activation_bytes for s in plan.steps if s.checkpointing == checkpointing)
    return plan.weights["model"] + plan.optimizer_bytes + step


def _measured(family: str) -> dict:
    """``<family>/step_gpu.json``, its rows of a setting re-measured in ``step_gpu_h200.json`` replaced by those."""
    first = json.loads((BENCH / family / "step_gpu.json").read_text())
    again = BENCH / family / "step_gpu_h200.json"
    if not again.exists():
        return first

    def key(r: dict) -> tuple:
        return r["model"], r["batch_size"], r["gradient_checkpointing"]

    newer = {key(r): {**r, "device": "H200"} for r in json.loads(again.read_text())["results"]}
    first["results"] = [newer.get(key(r), r) for r in first["results"]]
    return first


def rows():
    sana = _measured("sana")
    for batch in sorted({r["batch_size"] for r in sana["results"]}):
        for model in SANA:
            plan = _plan("sana", SANA[model], resolution=sana["settings"]["resolution"], train_batch_size=batch,
                         rank=sana["settings"]["rank"], lora_alpha=sana["settings"]["lora_alpha"],
                         lora_layers=sana["settings"]["targets"], max_sequence_length=sana["settings"]["text_tokens"])
            for r in sana["results"]:
                if r["model"] == model and r["batch_size"] == batch and r["status"] == "ok":
                    gc = r["gradient_checkpointing"]
                    yield f"Sana {model}", f"1024 px, batch {batch}, checkpointing {'on' if gc else 'off'}", \
                        comparable(plan, gc), r["peak_allocated_gib"], r.get("device", "H100")
    cog = _measured("cogvideox")
    s = cog["settings"]
    for r in cog["results"]:
        plan = _plan("cogvideox", COGVIDEOX[r["model"]], max_num_frames=s["frames"], height=s["height"],
                     width=s["width"], train_batch_size=r["batch_size"], rank=s["rank"], lora_alpha=s["rank"],
                     lora_layers=s["targets"], gradient_checkpointing=r["gradient_checkpointing"])
        yield f"CogVideoX {r['model']}", f"{s['frames']} x {s['height']} x {s['width']}, batch 1, checkpointing on", \
            comparable(plan, r["gradient_checkpointing"]), r["peak_allocated_gib"], r.get("device", "H100")
    vlm = json.loads((BENCH / "videollm" / "step_gpu.json").read_text())
    for r in vlm["results"]:
        if r["liger"] or r["status"] != "ok":
            continue  # the plan traces the plain loss
        plan = _plan("llava_next_video", LLAVA, num_frames=r["frames"], train_batch_size=r["batch_size"],
                     rank=vlm["settings"]["rank"], lora_alpha=vlm["settings"]["lora_alpha"],
                     max_sequence_length=r["seq_len"], gradient_checkpointing=r["gradient_checkpointing"])
        yield "LLaVA-NeXT-Video-7B", f"{r['frames']} frames x batch {r['batch_size']}, {r['seq_len']} tokens, " \
            "checkpointing on", comparable(plan, r["gradient_checkpointing"]), r["peak_allocated_gib"], "H100"


def main() -> int:
    print("| model | setting | predicted (GiB) | measured (GiB, max_memory_allocated) | error |")
    print("|---|---|---:|---:|---:|")
    for model, setting, predicted, measured, device in rows():
        predicted_gib = predicted / GIB
        print(f"| {model} | {setting} | {predicted_gib:.2f} | {measured:.2f} ({device}) | "
              f"{(predicted_gib - measured) / measured:+.1%} |", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
