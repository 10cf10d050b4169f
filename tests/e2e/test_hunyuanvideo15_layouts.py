"""HunyuanVideo 1.5's published layouts (tests/support/hunyuanvideo15_layout.py: the real widths, one block): found
from the folder with no ``--family``, the catalogue's defaults applied, one update trained, and the adapter loaded into
the stock pipeline's transformer (diffusers 0.42.1 has no ``load_lora_weights`` for it) with every LoRA module live at
the catalogue's rank; image-to-video with SigLIP's 729 tokens of the first frame."""

from __future__ import annotations

import pytest
import torch
from helpers import read_summary
from hunyuanvideo15_layout import I2V, T2V, hunyuanvideo15_pipeline
from safetensors.torch import load_file
from warm import run_script

pytestmark = pytest.mark.slow


@pytest.mark.parametrize(("hub_id", "family"), [(T2V, "hunyuanvideo15"), (I2V, "hunyuanvideo15_i2v")], ids=["t2v", "i2v"])
def test_the_480p_layout_is_found_trains_and_reloads(hub_id, family, tmp_path):
    from diffusers import HunyuanVideo15Transformer3DModel

    from dit_lora.data.synthetic.clips import build_demo_clips

    model = hunyuanvideo15_pipeline(tmp_path / "models", hub_id)
    data = tmp_path / "data"
    build_demo_clips(data, n=1, num_frames=5, size=64, fps=24)
    script = tmp_path / "python_m_dit_lora.py"
    script.write_text("from dit_lora.commands.cli import main\n\nmain()\n")
    out = tmp_path / "out"
    proc = run_script(script, ["train", "--pretrained_model_name_or_path", model, "--train_data_dir", data,
                               "--output_dir", out, "--cache_dir", tmp_path / "cache", "--max_train_steps", "1",
                               "--report_to", "none", "--mixed_precision", "no", "--max_num_frames", "5",
                               "--height", "64", "--width", "64", "--gradient_checkpointing", "false",
                               "--ignore_memory_plan", "true"],
                      timeout=600, warm=True)  # fmt: skip
    text = " ".join(proc.stdout.split())
    assert proc.returncode == 0, (proc.stdout + proc.stderr)[-6000:]
    assert f"has the published config of {hub_id}" in text and "num_layers 1 (published: 54)" in text
    summary = read_summary(out)
    assert summary["family"] == family and summary["status"] == "completed" and summary["applied_updates"] == 1
    assert summary["defaults"]["applied"] == {"rank": 32, "lora_alpha": 32, "learning_rate": 1e-4,
                                              "train_batch_size": 1}  # fmt: skip
    transformer = HunyuanVideo15Transformer3DModel.from_pretrained(model, subfolder="transformer")
    transformer.load_lora_adapter(str(out), weight_name="pytorch_lora_weights.safetensors", prefix="transformer")
    saved = load_file(str(out / "pytorch_lora_weights.safetensors"))
    live = {n: p for n, p in transformer.named_parameters() if "lora_" in n}
    assert len(live) == len(saved) > 0 and transformer.peft_config["default_0"].r == 32
    assert all(torch.isfinite(p).all() for p in live.values())
