"""Lumina 2 end to end: a tiny pipeline of its own dimensions, saved under diffusers' first name for the pipeline
(Lumina2Text2ImgPipeline), is found without --family, trains with dit-lora train and reloads into the stock
Lumina2Pipeline with every LoRA module live at the trained strength."""

from __future__ import annotations

from dataclasses import replace

import pytest
import torch
from safetensors.torch import load_file

from helpers import ROOT, read_summary


@pytest.mark.slow
def test_a_pipeline_of_its_own_dimensions_is_found_trained_and_reloaded(tmp_path):
    """A Lumina2Pipeline of 4 query heads of 8 over 2 key/value heads, caption width 40 (not the demo's): ``dit-lora
    train`` without --family finds the family and trains two fp32 steps; the adapter reloads into the stock
    Lumina2Pipeline with every LoRA module live at scale 1 and changes its output."""
    from diffusers import Lumina2Pipeline
    from warm import run_script

    from dit_lora.data.synthetic.shapes import make_shapes_dataset
    from dit_lora.families.diffusion import tiny
    from dit_lora.families.lumina2 import demo

    description = demo._tiny(1)
    config = demo.get_tiny_lumina2_config()
    transformer = dict(config["transformer"], hidden_size=32, num_attention_heads=4, num_kv_heads=2,
                       axes_dim_rope=[2, 2, 4], cap_feat_dim=40, num_layers=3)
    gemma = dict(config["text_encoder"], hidden_size=40)
    gemma_ids = {key: key for key in ("pad_token_id", "bos_token_id", "eos_token_id")}
    own = replace(description, marker={**description.marker, "own": True}, parts=(
        tiny.module("transformer", 1, "diffusers:Lumina2Transformer2DModel", transformer),
        description.parts[1],
        tiny.text_model(3, "transformers:Gemma2Model", "transformers:Gemma2Config", gemma, gemma_ids),
    ))  # fmt: skip
    model = tiny.build_pipeline(tmp_path / "model", own)
    tiny.rewrite_json(model / "model_index.json", lambda index: index.update(_class_name="Lumina2Text2ImgPipeline"))
    data = make_shapes_dataset(tmp_path / "data", n=2, size=64, seed=0)
    out = tmp_path / "out"
    args = ["train", "--pretrained_model_name_or_path", model, "--train_data_dir", data, "--output_dir", out,
            "--max_train_steps", "2", "--report_to", "none", "--mixed_precision", "no", "--resolution", "64",
            "--max_sequence_length", "48", "--train_batch_size", "2", "--learning_rate", "1e-2", "--rank", "4",
            "--lora_alpha", "8", "--skip_doctor", "true", "--ignore_memory_plan", "true", "--cache_dir",
            tmp_path / "cache"]
    proc = run_script(ROOT / "dit_lora" / "__main__.py", args, timeout=600, warm=True)
    assert proc.returncode == 0, (proc.stdout + proc.stderr)[-6000:]
    summary = read_summary(out)
    assert summary["config"]["family"] == "lumina2" and summary["status"] == "completed"
    pipe = Lumina2Pipeline.from_pretrained(model, torch_dtype=torch.float32)
    inputs = dict(prompt="a red circle", height=64, width=64, num_inference_steps=2, output_type="latent",
                  max_sequence_length=48)
    before = pipe(**inputs, generator=torch.manual_seed(0)).images
    pipe.load_lora_weights(out)
    saved = load_file(str(out / "pytorch_lora_weights.safetensors"))
    live = {n: m for n, m in pipe.transformer.named_modules() if hasattr(m, "lora_A") and m.active_adapters}
    # to_q/k/v and to_out.0 of the 3 joint layers and both 1-block refiners: every one trained and loaded
    assert len(live) == 4 * (3 + 1 + 1) and 2 * len(live) == len(saved)
    assert all(m.scaling[m.active_adapters[0]] == 1.0 for m in live.values())  # alpha folded into lora_B
    assert all(bool(saved[k].abs().sum() > 0) for k in saved if "lora_B" in k)
    after = pipe(**inputs, generator=torch.manual_seed(0)).images
    assert not torch.allclose(before, after)
    assert (out / "pytorch_lora_weights_comfyui.safetensors").is_file()  # and ComfyUI's file beside it
