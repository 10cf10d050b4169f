"""The end of every image family's "a tiny pipeline of its own dimensions" test (tests/families/*/test_spec.py):
``dit-lora train`` without --family finds the family and trains two fp32 steps; the adapter reloads into the stock
pipeline with every LoRA module live at scale 1 (alpha folded into lora_B), each saved lora_B trained, and the
pipeline's output changed."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch
from safetensors.torch import load_file

from helpers import ROOT, read_summary


def found_trained_and_reloaded(
    model: Path, data: Path, tmp_path: Path, *, family: str, pipeline: str, length: int, live: int, **call: Any
) -> None:
    """Train ``model`` (a pipeline folder of the family's class) on ``data`` at 64 px with ``length`` caption tokens,
    then reload it into diffusers' ``pipeline`` and check ``live`` LoRA modules; ``call``: the pipeline call's other
    arguments (an edit model's image, a guidance scale)."""
    import diffusers
    from warm import run_script

    out = tmp_path / "out"
    args = ["train", "--pretrained_model_name_or_path", model, "--train_data_dir", data, "--output_dir", out,
            "--max_train_steps", "2", "--report_to", "none", "--mixed_precision", "no", "--resolution", "64",
            "--max_sequence_length", str(length), "--train_batch_size", "2", "--learning_rate", "1e-2", "--rank", "4",
            "--lora_alpha", "8", "--skip_doctor", "true", "--ignore_memory_plan", "true", "--cache_dir",
            tmp_path / "cache"]  # fmt: skip
    proc = run_script(ROOT / "dit_lora" / "__main__.py", args, timeout=600, warm=True)
    assert proc.returncode == 0, (proc.stdout + proc.stderr)[-6000:]
    summary = read_summary(out)
    assert summary["config"]["family"] == family and summary["status"] == "completed"
    pipe = getattr(diffusers, pipeline).from_pretrained(model, torch_dtype=torch.float32)
    inputs = dict(prompt="a red circle", height=64, width=64, num_inference_steps=2, output_type="latent",
                  max_sequence_length=length, **call)  # fmt: skip
    before = pipe(**inputs, generator=torch.manual_seed(0)).images
    pipe.load_lora_weights(out)
    saved = load_file(str(out / "pytorch_lora_weights.safetensors"))
    found = {n: m for n, m in pipe.transformer.named_modules() if hasattr(m, "lora_A") and m.active_adapters}
    assert len(found) == live and 2 * len(found) == len(saved)  # every one trained and loaded
    assert all(m.scaling[m.active_adapters[0]] == 1.0 for m in found.values())  # alpha folded into lora_B
    assert all(bool(saved[k].abs().sum() > 0) for k in saved if "lora_B" in k)
    after = pipe(**inputs, generator=torch.manual_seed(0)).images
    assert not torch.allclose(before, after)
