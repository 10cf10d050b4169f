"""Qwen-Image as the Hub lays it out (tests/support/qwenimage_layout.py: the catalogue's configs, real widths, one
block, a local tokenizer): ``python -m dit_lora train`` finds the family from the folder alone, picks the catalogue's
defaults and says so, trains one step, and the adapter reloads live into the stock pipeline."""

from __future__ import annotations

import pytest
import torch
from qwenimage_layout import qwenimage_pipeline
from safetensors.torch import load_file

from helpers import ROOT, read_summary
from warm import run_script

pytestmark = pytest.mark.slow


def test_qwen_image_layout_is_found_trains_and_reloads(tmp_path):
    from diffusers import QwenImagePipeline

    from dit_lora.data.synthetic.shapes import make_shapes_dataset

    model = qwenimage_pipeline(tmp_path / "models")
    assert sorted(p.name for p in (model / "tokenizer").iterdir()) == [
        "added_tokens.json", "merges.txt", "special_tokens_map.json", "tokenizer_config.json", "vocab.json"]
    data = make_shapes_dataset(tmp_path / "data", n=1, size=64, seed=0)
    out = tmp_path / "out"
    # no --family: the folder's model_index.json and configs name it; 64 px and fp32 because a CPU must train it
    args = ["train", "--pretrained_model_name_or_path", str(model), "--train_data_dir", str(data), "--output_dir",
            str(out), "--max_train_steps", "1", "--report_to", "none", "--mixed_precision", "no", "--resolution", "64",
            "--gradient_accumulation_steps", "1", "--skip_doctor"]
    proc = run_script(ROOT / "dit_lora" / "__main__.py", args, timeout=600, warm=True)
    text = " ".join((proc.stdout + proc.stderr).split())
    assert proc.returncode == 0, text[-6000:]
    assert "has the published config of Qwen/Qwen-Image" in text and "except num_layers 1 (published: 60)" in text
    summary = read_summary(out)
    assert summary["defaults"]["applied"] == {"rank": 16, "lora_alpha": 16, "learning_rate": 2e-4,
                                              "train_batch_size": 1, "max_sequence_length": 512}
    assert summary["status"] == "completed" and summary["applied_updates"] == 1
    pipe = QwenImagePipeline.from_pretrained(model, torch_dtype=torch.bfloat16)
    pipe.load_lora_weights(out)
    saved = load_file(str(out / "pytorch_lora_weights.safetensors"))
    live = [m for m in pipe.transformer.modules() if hasattr(m, "lora_B") and "default_0" in m.lora_B]
    assert len(live) == len(saved) // 2 > 0 and pipe.transformer.peft_config["default_0"].r == 16
    assert all(m.lora_B["default_0"].weight.abs().sum() > 0 for m in live)
