"""families/flux2/demo.py: the tiny offline FLUX.2 pipelines load in the stock pipelines and encode as they do."""

from __future__ import annotations

import json

import pytest
import torch

from dit_lora.families.flux2.demo import build_tiny_flux2_pipeline, tiny_configs


@pytest.mark.parametrize("variant", ["dev", "klein"])
def test_the_tiny_pipeline_loads_in_its_stock_pipeline_and_draws(tmp_path, variant):
    from diffusers import Flux2KleinPipeline, Flux2Pipeline

    path = build_tiny_flux2_pipeline(tmp_path / variant, variant)
    stamp = (path / "transformer" / "config.json").stat().st_mtime_ns
    assert build_tiny_flux2_pipeline(tmp_path / variant, variant) == path  # idempotent: nothing rebuilt
    assert (path / "transformer" / "config.json").stat().st_mtime_ns == stamp
    index = json.loads((path / "model_index.json").read_text())
    cls = Flux2Pipeline if variant == "dev" else Flux2KleinPipeline
    assert index["_class_name"] == cls.__name__ and index.get("is_distilled", False) is False
    pipe = cls.from_pretrained(path, torch_dtype=torch.float32)
    assert pipe.transformer.config.guidance_embeds is (variant == "dev")
    assert pipe.vae.bn.running_var.min() > 0 and not torch.equal(pipe.vae.bn.running_mean, torch.zeros(16))
    image = pipe(prompt="a red circle", height=64, width=64, num_inference_steps=2, max_sequence_length=16,
                 text_encoder_out_layers=(2, 2, 2), guidance_scale=2.0, output_type="pil").images[0]
    assert image.size == (64, 64)


def test_configs_fit_together_and_unknown_variants_are_refused():
    for variant in ("dev", "klein"):
        config = tiny_configs(variant)
        text = config["text_encoder"].get("text_config", config["text_encoder"])
        assert config["transformer"]["joint_attention_dim"] == 3 * text["hidden_size"]
        assert config["transformer"]["in_channels"] == 4 * config["vae"]["latent_channels"]
    with pytest.raises(ValueError, match="dev"):
        tiny_configs("pro")
