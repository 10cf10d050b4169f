"""families/hunyuanvideo15/adapter.py and the kit's writer for a pipeline without a LoRA saver: diffusers' own file
with ``transformer.`` keys and metadata, which the transformer's ``load_lora_adapter`` loads at its rank; the card's
snippet loads it that way and sets the guidance on the guider."""

from __future__ import annotations

import copy

import torch
from safetensors import safe_open

from dit_lora.config import TrainConfig
from dit_lora.kit.adapter import KitAdapter
from dit_lora.registry import get_spec


def test_the_kit_writes_a_file_the_transformers_loader_reads(hv15_components, tmp_path):
    from peft import LoraConfig, get_peft_model_state_dict

    spec = get_spec("hunyuanvideo15")
    model = copy.deepcopy(hv15_components["transformer"])
    config = LoraConfig(r=4, lora_alpha=4, target_modules=["to_q", "add_k_proj"], init_lora_weights=False)
    model.add_adapter(config)
    state = get_peft_model_state_dict(model)
    assert isinstance(spec.adapter, KitAdapter)
    path = spec.adapter.write_lora_file(tmp_path, state, config.to_dict(), "pytorch_lora_weights.safetensors")
    with safe_open(str(path), "pt") as f:
        keys = list(f.keys())
        assert f.metadata() and all(k.startswith("transformer.") for k in keys)
    fresh = copy.deepcopy(hv15_components["transformer"])
    fresh.load_lora_adapter(str(tmp_path), weight_name=path.name, prefix="transformer")
    x = torch.randn(1, 3, model.config.num_attention_heads * model.config.attention_head_dim)
    layer = "transformer_blocks.0.attn.to_q"
    with torch.no_grad():
        assert torch.equal(fresh.get_submodule(layer)(x), model.get_submodule(layer)(x))


def test_the_card_loads_into_the_transformer_and_guides_through_the_guider():
    for family, image in (("hunyuanvideo15", False), ("hunyuanvideo15_i2v", True)):
        cfg = TrainConfig.for_family(
            family,
            pretrained_model_name_or_path="hunyuanvideo-community/HunyuanVideo-1.5-Diffusers-480p_t2v",
            validation_prompt="a fox",
            validation_guidance_scale=5.5,
        )
        code = get_spec(family).card.usage_snippet(cfg, "me/my-lora")
        assert 'pipe.transformer.load_lora_adapter("me/my-lora"' in code and "load_lora_weights(" not in code
        assert "ClassifierFreeGuidance(guidance_scale=5.5)" in code and 'output_type="pil"' in code
        assert ("image=image" in code) == image and ("height=480, width=848" in code) != image
        assert "fps" in code or "rate" in code
