"""Chroma end to end: a tiny pipeline of its own dimensions is found without --family, trains with dit-lora train and
reloads into the stock ChromaPipeline with every LoRA module live at the trained strength."""

from __future__ import annotations

from dataclasses import replace

import pytest
from own_dimensions import found_trained_and_reloaded


@pytest.mark.slow
def test_a_pipeline_of_its_own_dimensions_is_found_trained_and_reloaded(tmp_path):
    """A ChromaPipeline of 3 heads of 8, caption width 40, an approximator 20 wide (not the demo's): ``dit-lora train``
    without --family finds the family and trains two fp32 steps; the adapter reloads into the stock ChromaPipeline
    with every LoRA module live at scale 1 and changes its output."""

    from dit_lora.data.synthetic.shapes import make_shapes_dataset
    from dit_lora.families.chroma import demo
    from dit_lora.kit import tiny

    description = demo._tiny("hd", 1)
    config = demo.DEMO.read().variant("hd")
    transformer = dict(config["transformer"], num_attention_heads=3, attention_head_dim=8, axes_dims_rope=[2, 2, 4],
                       joint_attention_dim=40, approximator_hidden_dim=20, num_single_layers=3)
    t5 = dict(config["text_encoder"], d_model=40)
    t5_ids = {"pad_token_id": "pad_token_id", "eos_token_id": "eos_token_id"}
    own = replace(description, marker={**description.marker, "own": True}, parts=(
        tiny.module("transformer", 1, "diffusers:ChromaTransformer2DModel", transformer),
        description.parts[1],
        tiny.text_model(3, "transformers:T5EncoderModel", "transformers:T5Config", t5, t5_ids),
    ))  # fmt: skip
    model = tiny.build_pipeline(tmp_path / "model", own)
    data = make_shapes_dataset(tmp_path / "data", n=2, size=64, seed=0)
    # the double blocks' 12 default targets, the single blocks' to_q/k/v
    found_trained_and_reloaded(model, data, tmp_path, family="chroma", pipeline="ChromaPipeline", length=16,
                               live=2 * 12 + 3 * 3, guidance_scale=1.0)
