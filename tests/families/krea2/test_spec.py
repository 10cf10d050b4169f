"""Krea 2 end to end: a tiny pipeline of its own dimensions is found without --family, trains with dit-lora train and
reloads into the stock Krea2Pipeline with every LoRA module live at the trained strength."""

from __future__ import annotations

from dataclasses import replace

import pytest
from own_dimensions import found_trained_and_reloaded


@pytest.mark.slow
def test_a_pipeline_of_its_own_dimensions_is_found_trained_and_reloaded(tmp_path):
    """A Krea2Pipeline of 3 query heads of 8 over 1 key/value head, text width 20 tapped at 2 layers, 3 blocks (not
    the demo's): ``dit-lora train`` without --family finds the family and trains two fp32 steps; the adapter reloads
    into the stock Krea2Pipeline with every LoRA module live at scale 1 and changes its output."""

    from dit_lora.data.synthetic.shapes import make_shapes_dataset
    from dit_lora.kit import tiny
    from dit_lora.families.krea2 import demo

    description = demo._tiny("raw", 1)
    config = demo.DEMO.read().variant("raw")
    transformer = dict(config["transformer"], num_attention_heads=3, attention_head_dim=8, axes_dims_rope=[2, 2, 4],
                       text_hidden_dim=20, num_text_layers=2, num_layers=3)
    text = dict(config["text"], hidden_size=20, head_dim=10, num_hidden_layers=2,
                rope_scaling={"mrope_interleaved": True, "mrope_section": [1, 2, 2], "rope_type": "default"})
    vision = dict(config["vision"], out_hidden_size=20)
    encoder = description.parts[2]
    own = replace(description, marker={**description.marker, "own": True}, parts=(
        tiny.module("transformer", 1, "diffusers:Krea2Transformer2DModel", transformer),
        description.parts[1],
        tiny.qwen3_vl(3, text, vision),
    ), pipeline_kwargs={"text_encoder_select_layers": (1, 2)})  # fmt: skip
    assert encoder.name == "text_encoder"
    model = tiny.build_pipeline(tmp_path / "model", own)
    data = make_shapes_dataset(tmp_path / "data", n=2, size=64, seed=0)
    # per block to_q/k/v/gate/out.0 and ff.up/down (7), the text fusion's 2 blocks' (7 each), and 8 single modules
    found_trained_and_reloaded(model, data, tmp_path, family="krea2", pipeline="Krea2Pipeline", length=16,
                               live=3 * 7 + 2 * 7 + 8, guidance_scale=1.0)
