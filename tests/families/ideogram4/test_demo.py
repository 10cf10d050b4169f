"""Ideogram 4's tiny pipeline: two transformers, a Qwen3-VL text encoder deep enough for the pipeline's taps (a
module constant, up to layer 35) and as wide as the transformer's text features need, a VAE whose statistics are not
0 and 1, a scheduler without a shift of its own."""

from __future__ import annotations

import json


def test_the_tiny_pipeline_holds_what_the_pipeline_taps(tiny_ideogram4, parts):
    from diffusers.pipelines.ideogram4.pipeline_ideogram4 import QWEN3_VL_ACTIVATION_LAYERS

    index = json.loads((tiny_ideogram4 / "model_index.json").read_text())
    assert (
        index["_class_name"] == "Ideogram4Pipeline"
        and index["unconditional_transformer"][1] == "Ideogram4Transformer2DModel"
    )
    text = parts["text_encoder"].config.text_config
    assert text.num_hidden_layers > max(QWEN3_VL_ACTIVATION_LAYERS)
    assert parts["transformer"].config.llm_features_dim == len(QWEN3_VL_ACTIVATION_LAYERS) * text.hidden_size
    assert parts["unconditional_transformer"].config == parts["transformer"].config
    assert bool(parts["vae"].bn.running_var.sub(1).abs().sum() > 0)
    assert not parts["scheduler"].config.use_dynamic_shifting and parts["scheduler"].config.shift == 1.0
