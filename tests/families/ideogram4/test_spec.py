"""Ideogram 4 end to end: a tiny pipeline of its own dimensions is found without --family, trains with dit-lora train
and reloads into the stock Ideogram4Pipeline with every LoRA module live at the trained strength."""

from __future__ import annotations

from dataclasses import replace

import pytest
from own_dimensions import found_trained_and_reloaded


@pytest.mark.slow
def test_a_pipeline_of_its_own_dimensions_is_found_trained_and_reloaded(tmp_path):
    """An Ideogram4Pipeline of 3 heads of 8, a 40-wide feed-forward, text width 6 (78 features over the 13 taps), 3
    blocks (not the demo's): ``dit-lora train`` without --family finds the family and trains two fp32 steps; the
    adapter reloads into the stock Ideogram4Pipeline with every LoRA module live at scale 1 and changes its
    output."""
    from dit_lora.data.synthetic.shapes import make_shapes_dataset
    from dit_lora.kit import tiny
    from dit_lora.families.ideogram4 import demo

    description = demo._tiny("v4", 1)
    config = demo.DEMO.read().variant("v4")
    transformer = dict(
        config["transformer"],
        num_attention_heads=3,
        attention_head_dim=8,
        intermediate_size=40,
        llm_features_dim=13 * 6,
        num_layers=3,
    )
    text = dict(config["text"], hidden_size=6)
    vision = dict(config["vision"], out_hidden_size=6)
    own = replace(description, marker={**description.marker, "own": True}, parts=(
        tiny.module("transformer", 1, "diffusers:Ideogram4Transformer2DModel", transformer),
        tiny.module("unconditional_transformer", 4, "diffusers:Ideogram4Transformer2DModel", transformer),
        description.parts[2],
        tiny.qwen3_vl(3, text, vision),
    ))  # fmt: skip
    assert description.parts[2].name == "vae"
    model = tiny.build_pipeline(tmp_path / "model", own)
    data = make_shapes_dataset(tmp_path / "data", n=2, size=64, seed=0)
    # per block attention.to_q/k/v/to_out.0 and feed_forward.w1/w2/w3
    found_trained_and_reloaded(
        model,
        data,
        tmp_path,
        family="ideogram4",
        pipeline="Ideogram4Pipeline",
        length=48,
        live=3 * 7,
        guidance_scale=2.0,
        guidance_schedule=None,
    )
