"""families/flux2/adapter.py: the adapter file, the model card's snippet, rows and license.

(The reload into the stock pipelines, every LoRA module live and the output the trained model's, is
tests/e2e/test_flux2.py.)"""

from __future__ import annotations

import torch
from diffusers import Flux2KleinPipeline, Flux2Pipeline
from diffusers.loaders import Flux2LoraLoaderMixin
from flux2_configs import flux2_cfg
from safetensors.torch import load_file

from dit_lora.registry import get_family


def test_both_pipelines_save_with_the_mixins_saver(tmp_path):
    assert Flux2Pipeline.save_lora_weights.__func__ is Flux2LoraLoaderMixin.save_lora_weights.__func__
    assert Flux2KleinPipeline.save_lora_weights.__func__ is Flux2LoraLoaderMixin.save_lora_weights.__func__
    spec = get_family("flux2")
    lora = {"single_transformer_blocks.0.attn.to_qkv_mlp_proj.lora_A.weight": torch.ones(1, 4),
            "single_transformer_blocks.0.attn.to_qkv_mlp_proj.lora_B.weight": torch.ones(4, 1)}
    path = spec.adapter.save_adapter(tmp_path, lora, {"r": 1, "lora_alpha": 1})
    assert path == tmp_path / spec.info.adapter_weight_name and path.is_file()
    assert set(load_file(str(path))) == {f"transformer.{k}" for k in lora}


def test_usage_snippet_card_and_license(tmp_path):
    card = get_family("flux2").card
    cfg = flux2_cfg(pretrained_model_name_or_path="black-forest-labs/FLUX.2-klein-base-4B", validation_prompt='a "cat"')
    snippet = card.usage_snippet(cfg, "me/adapter")
    assert 'pipe.load_lora_weights("me/adapter")' in snippet and '"a \\"cat\\""' in snippet
    assert "from diffusers import Flux2Pipeline" in snippet  # the Hub id's model_index is not read offline: dev's
    compile(snippet, "snippet", "exec")
    (tmp_path / "model_index.json").write_text('{"_class_name": "Flux2KleinPipeline"}')
    assert "Flux2KleinPipeline.from_pretrained" in card.usage_snippet(
        flux2_cfg(pretrained_model_name_or_path=str(tmp_path)), "x")
    settings = card.card_settings(cfg)
    assert settings == {"weighting_scheme": "logit_normal", "flux2_shift": "dynamic", "flux2_train_guidance": 1.0,
                        "max_sequence_length": 512}
    assert card.base_model_license(cfg.model) == "apache-2.0"
    assert card.base_model_license(flux2_cfg(pretrained_model_name_or_path="black-forest-labs/FLUX.2-dev").model) == "other"
    assert card.base_model_license(flux2_cfg().model) is None
