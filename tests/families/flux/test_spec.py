"""FLUX.1 and FLUX.1 Kontext end to end: a tiny pipeline of its own dimensions is found without --family, trains with
dit-lora train and reloads into the stock FluxPipeline / FluxKontextPipeline with every LoRA module live at the trained
strength."""

from __future__ import annotations

import pytest
from own_dimensions import found_trained_and_reloaded


@pytest.mark.slow
@pytest.mark.parametrize("variant,family", [("dev", "flux"), ("kontext", "flux_kontext")])
def test_a_pipeline_of_its_own_dimensions_is_found_trained_and_reloaded(tmp_path, variant, family):
    """A FluxPipeline (a FluxKontextPipeline, its samples with control images) of 3 heads of 8, caption width 40 and
    pooled width 20 (not the demo's): ``dit-lora train`` without --family finds the family, trains two fp32 steps;
    the adapter reloads into the stock pipeline with every LoRA module live at scale 1 and changes its output."""
    from PIL import Image

    from dit_lora.data.synthetic.shapes import make_shapes_dataset
    from dit_lora.kit import tiny
    from dit_lora.kit.demo_data import add_control_images
    from dit_lora.families.flux import demo

    description = demo._tiny(variant, 1)
    config = demo.DEMO.read().variant("dev")
    transformer = dict(config["transformer"], num_attention_heads=3, attention_head_dim=8, axes_dims_rope=[2, 2, 4],
                       joint_attention_dim=40, pooled_projection_dim=20, num_single_layers=3)
    clip = dict(config["text_encoder"], hidden_size=20, projection_dim=20)
    t5 = dict(config["text_encoder_2"], d_model=40)
    clip_ids = {"bos_token_id": "bos_token_id", "eos_token_id": "eos_token_id", "pad_token_id": "pad_token_id"}
    t5_ids = {"pad_token_id": "pad_token_id", "eos_token_id": "eos_token_id"}
    from dataclasses import replace

    own = replace(description, marker={**description.marker, "own": True}, parts=(
        tiny.module("transformer", 1, "diffusers:FluxTransformer2DModel", transformer),
        description.parts[1],
        tiny.text_model(3, "transformers:CLIPTextModel", "transformers:CLIPTextConfig", clip, clip_ids),
        tiny.text_model(4, "transformers:T5EncoderModel", "transformers:T5Config", t5, t5_ids,
                        name="text_encoder_2", tokenizer="tokenizer_2"),
    ))
    model = tiny.build_pipeline(tmp_path / "model", own)
    data = make_shapes_dataset(tmp_path / "data", n=2, size=64, seed=0)
    if variant == "kontext":
        add_control_images(data)
    call = {}
    if variant == "kontext":
        call = dict(image=Image.new("RGB", (64, 64), (200, 40, 40)), max_area=64 * 64, _auto_resize=False)
    # the double blocks' 12 default targets, the single blocks' to_q/k/v (Kontext's: and proj_mlp, as diffusers'
    # Kontext script)
    found_trained_and_reloaded(model, data, tmp_path, family=family, pipeline=demo.PIPELINES[variant], length=16,
                               live=2 * 12 + 3 * (4 if variant == "kontext" else 3), **call)
