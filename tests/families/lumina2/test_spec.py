"""Lumina 2 end to end: a tiny pipeline of its own dimensions, saved under diffusers' first name for the pipeline
(Lumina2Text2ImgPipeline), is found without --family, trains with dit-lora train and reloads into the stock
Lumina2Pipeline with every LoRA module live at the trained strength."""

from __future__ import annotations

from dataclasses import replace

import pytest
from own_dimensions import found_trained_and_reloaded


@pytest.mark.slow
def test_a_pipeline_of_its_own_dimensions_is_found_trained_and_reloaded(tmp_path):
    """A Lumina2Pipeline of 4 query heads of 8 over 2 key/value heads, caption width 40 (not the demo's): ``dit-lora
    train`` without --family finds the family and trains two fp32 steps; the adapter reloads into the stock
    Lumina2Pipeline with every LoRA module live at scale 1 and changes its output."""

    from dit_lora.data.synthetic.shapes import make_shapes_dataset
    from dit_lora.kit import tiny
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
    # to_q/k/v and to_out.0 of the 3 joint layers and both 1-block refiners
    found_trained_and_reloaded(model, data, tmp_path, family="lumina2", pipeline="Lumina2Pipeline", length=48,
                               live=4 * (3 + 1 + 1))
    out = tmp_path / "out"
    assert (out / "pytorch_lora_weights_comfyui.safetensors").is_file()  # and ComfyUI's file beside it
