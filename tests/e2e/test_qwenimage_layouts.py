"""Qwen-Image and Qwen-Image-Edit-2509 as the Hub lays them out (tests/support/qwenimage_layout.py: the catalogue's
configs, real widths, one block, a local tokenizer; the Edit folder links the text-to-image weights, which have its
widths, and adds its configs and processor/): ``python -m dit_lora train`` finds each family from the folder alone,
picks the catalogue's defaults and says so, trains one step (the Edit run on control images named in metadata.jsonl),
and the adapter reloads live into the stock pipeline."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from qwenimage_layout import edit_layout_from, qwenimage_pipeline
from safetensors.torch import load_file

from helpers import ROOT, read_summary
from warm import run_script

pytestmark = pytest.mark.slow


def _train(model: Path, data: Path, out: Path) -> tuple[str, dict]:
    """One step with no --family (the folder's model_index.json and configs name it); 64 px and fp32: a CPU."""
    args = ["train", "--pretrained_model_name_or_path", str(model), "--train_data_dir", str(data), "--output_dir",
            str(out), "--max_train_steps", "1", "--report_to", "none", "--mixed_precision", "no", "--resolution", "64",
            "--gradient_accumulation_steps", "1", "--skip_doctor"]
    proc = run_script(ROOT / "dit_lora" / "__main__.py", args, timeout=600, warm=True)
    text = " ".join((proc.stdout + proc.stderr).split())
    assert proc.returncode == 0, text[-6000:]
    summary = read_summary(out)
    assert summary["status"] == "completed" and summary["applied_updates"] == 1
    assert summary["defaults"]["applied"] == {"rank": 16, "lora_alpha": 16, "learning_rate": 2e-4,
                                              "train_batch_size": 1, "max_sequence_length": 512}
    return text, summary


def _stock(pipeline_class, model: Path):
    """The stock pipeline of ``model`` as load_lora_weights needs it: the transformer as stored (bf16), without the
    Qwen2.5-VL text encoder (7B-wide) and its tokenizer/processor, which the adapter never touches."""
    return pipeline_class.from_pretrained(model, torch_dtype=torch.bfloat16, text_encoder=None, tokenizer=None,
                                          **({"processor": None} if "Edit" in pipeline_class.__name__ else {}))


def _live(pipe, out: Path) -> None:
    pipe.load_lora_weights(out)
    saved = load_file(str(out / "pytorch_lora_weights.safetensors"))
    live = [m for m in pipe.transformer.modules() if hasattr(m, "lora_B") and "default_0" in m.lora_B]
    assert len(live) == len(saved) // 2 > 0 and pipe.transformer.peft_config["default_0"].r == 16
    assert all(m.lora_B["default_0"].weight.abs().sum() > 0 for m in live)


def test_qwen_image_and_edit_2509_layouts_are_found_train_and_reload(tmp_path):
    from diffusers import QwenImageEditPlusPipeline, QwenImagePipeline

    from dit_lora.data.synthetic.shapes import make_shapes_dataset
    from dit_lora.kit.demo_data import add_control_images

    model = qwenimage_pipeline(tmp_path / "models")
    assert sorted(p.name for p in (model / "tokenizer").iterdir()) == [
        "added_tokens.json", "merges.txt", "special_tokens_map.json", "tokenizer_config.json", "vocab.json"]
    data = make_shapes_dataset(tmp_path / "data", n=1, size=64, seed=0)
    text, _ = _train(model, data, tmp_path / "out")
    assert "has the published config of Qwen/Qwen-Image" in text and "except num_layers 1 (published: 60)" in text
    _live(_stock(QwenImagePipeline, model), tmp_path / "out")

    edit = edit_layout_from(model, tmp_path / "models")
    edit_data = add_control_images(make_shapes_dataset(tmp_path / "edit_data", n=1, size=64, seed=1))
    text, summary = _train(edit, edit_data, tmp_path / "edit_out")
    assert "has the published config of Qwen/Qwen-Image-Edit-2509" in text
    assert summary["config"]["family"] == "qwenimage_edit_plus"
    _live(_stock(QwenImageEditPlusPipeline, edit), tmp_path / "edit_out")
