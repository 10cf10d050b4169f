"""Recipes pointed at checkpoint folders laid out as the Hub has them (tests/support/real_layout.py: the
catalogue's configs, real widths and heads, the real tokenizer file sets, depth cut to one layer, random
weights): with minimal flags they pick the catalogue's defaults and say so, train, and the adapter reloads in
the stock consumer."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from PIL import Image
from real_layout import cogvideox_pipeline, dit_pipeline, sana_pipeline
from safetensors.torch import load_file

from helpers import read_summary, run_recipe

pytestmark = pytest.mark.slow


def _run(recipe: str, model: Path, data: Path, out: Path, *extra: str):
    """A data folder, a step count and where to write; ``--mixed_precision no`` because bf16 matmuls at these
    widths are 10x slower on a CPU (the CogVideoX run: 417 s in bf16, 34 s in fp32); other flags as the caller
    names them."""
    args = ["--pretrained_model_name_or_path", str(model), "--train_data_dir", str(data), "--output_dir", str(out),
            "--max_train_steps", "1", "--report_to", "none", "--mixed_precision", "no", *extra]
    proc = run_recipe(args, recipe=recipe, timeout=600)
    text = proc.stdout + proc.stderr
    assert proc.returncode == 0, text[-6000:]
    return " ".join(proc.stdout.split()), read_summary(out)


def _lora_params(module: torch.nn.Module) -> dict[str, torch.Tensor]:
    return {n: p for n, p in module.named_parameters() if "lora_" in n}


def test_sana_600m_layout(tmp_path):
    from diffusers import SanaPipeline

    from dit_lora.demo.shapes import make_shapes_dataset

    model = sana_pipeline(tmp_path / "models")
    data = make_shapes_dataset(tmp_path / "data", n=4, size=64, seed=0)
    text, summary = _run("sana", model, data, tmp_path / "out")
    assert "has the published config of Efficient-Large-Model/Sana_600M_1024px_diffusers" in text
    assert "except num_layers 1 (published: 28)" in text
    assert summary["defaults"]["applied"] == {"rank": 4, "lora_alpha": 4, "learning_rate": 1e-4, "train_batch_size": 1,
                                              "gradient_accumulation_steps": 4, "resolution": 1024}
    assert summary["status"] == "completed" and summary["applied_updates"] == 1
    assert summary["samples_seen"] == 4  # one update of batch 1 x accumulation 4 (the accelerator got the 4)
    pipe = SanaPipeline.from_pretrained(model, torch_dtype=torch.float32)
    pipe.load_lora_weights(tmp_path / "out")
    saved = load_file(str(tmp_path / "out" / "pytorch_lora_weights.safetensors"))
    loaded = _lora_params(pipe.transformer)
    assert len(loaded) == len(saved) > 0 and pipe.transformer.peft_config["default_0"].r == 4
    assert all(torch.isfinite(p).all() for p in loaded.values())


def test_cogvideox_5b_layout(tmp_path):
    """CPU cannot train 49 x 480 x 720 in a test: the size flags are the only extra ones; the defaults block, the
    trained size and the spiece.model-only tokenizer are the real ones."""
    from diffusers import CogVideoXPipeline

    from dit_lora.demo.clips import make_moving_square_dataset

    model = cogvideox_pipeline(tmp_path / "models")
    data = make_moving_square_dataset(tmp_path / "data", n=2, num_frames=9, size=64, seed=0)
    assert sorted(p.name for p in (model / "tokenizer").iterdir()) == [
        "added_tokens.json", "special_tokens_map.json", "spiece.model", "tokenizer_config.json"]
    text, summary = _run("cogvideox", model, data, tmp_path / "out", "--height", "64", "--width", "64",
                         "--max_num_frames", "9", "--allow_untrained_resolution", "true")
    assert "has the published config of THUDM/CogVideoX-5b" in text and "except num_layers 1 (published: 42)" in text
    assert "the checkpoint was trained at 49x480x720" in text
    assert summary["defaults"]["applied"] == {"rank": 128, "lora_alpha": 64, "learning_rate": 2e-5,
                                              "train_batch_size": 1}
    assert summary["status"] == "completed" and summary["applied_updates"] == 1
    pipe = CogVideoXPipeline.from_pretrained(model, torch_dtype=torch.bfloat16)
    pipe.load_lora_weights(tmp_path / "out")
    saved = load_file(str(tmp_path / "out" / "pytorch_lora_weights.safetensors"))
    assert len(_lora_params(pipe.transformer)) == len(saved) > 0
    assert pipe.transformer.peft_config["default_0"].r == 128


def test_dit_xl_256_layout_with_imagenet_class_folders(tmp_path):
    """No --resolution, no --num_classes: 256 px from the catalogue, and wnid folders keep their ImageNet rows."""
    from diffusers import DiTPipeline

    import dit_lora

    model = dit_pipeline(tmp_path / "models", labels={"0": "tench, Tinca tinca", "1": "goldfish, Carassius auratus"})
    data = tmp_path / "data"
    for wnid, color in (("n01440764", (200, 40, 40)), ("n01443537", (240, 160, 20))):
        (data / wnid).mkdir(parents=True)
        for i in range(2):
            Image.new("RGB", (64, 64), tuple(c - 30 * i for c in color)).save(data / wnid / f"{i}.png")
    text, summary = _run("dit_class", model, data, tmp_path / "out")
    assert "has the published config of facebook/DiT-XL-2-256" in text
    assert summary["defaults"]["applied"] == {"learning_rate": 1e-4, "resolution": 256}
    assert "keep their pretrained rows of the 1000-class embedding (no resize)" in text
    pipe = DiTPipeline.from_pretrained(model, torch_dtype=torch.float32)
    dit_lora.load_adapter(pipe, tmp_path / "out")
    assert int(pipe.transformer.config.num_embeds_ada_norm) == 1000
    assert pipe.get_label_ids(["tench", "n01443537", "goldfish"]) == [0, 1, 1]
    assert len(_lora_params(pipe.transformer)) > 0
