"""families/zimage/adapter.py: the adapter saved by ZImagePipeline's own saver loads into a stock ZImagePipeline
with every LoRA module live and the trained model's output; the model card's snippet, rows and license."""

from __future__ import annotations

import torch
from diffusers import ZImagePipeline
from peft import LoraConfig
from peft.utils import get_peft_model_state_dict
from safetensors.torch import load_file
from zimage_layout import zimage_cfg

from dit_lora.output.adapter import fold_lora_scale
from dit_lora.registry import get_family


def _forward(transformer, seed=0):
    gen = torch.Generator().manual_seed(seed)
    x = [torch.randn(4, 1, 16, 16, generator=gen) for _ in range(2)]
    caps = [torch.randn(7, 48, generator=gen), torch.randn(11, 48, generator=gen)]
    with torch.no_grad():
        return torch.stack(transformer(x, torch.tensor([0.3, 0.8]), caps, return_dict=False)[0])


def test_saved_adapter_reloads_live_at_the_trained_strength(tmp_path):
    from zimage_layout import tiny_components

    spec = get_family("zimage")
    trained = tiny_components(seed=0)["transformer"]
    config = {"r": 4, "lora_alpha": 8, "target_modules": list(spec.info.default_lora_layers)}
    trained.add_adapter(LoraConfig(**config, init_lora_weights="gaussian"))
    with torch.no_grad():
        for name, param in trained.named_parameters():
            if "lora_B" in name:
                param.normal_(std=0.05)
    expected = _forward(trained)
    state, folded = fold_lora_scale(get_peft_model_state_dict(trained), config)
    path = spec.adapter.save_adapter(tmp_path, state, folded)
    saved = load_file(str(path))
    assert path.name == spec.info.adapter_weight_name and all(k.startswith("transformer.") for k in saved)
    assert any(".noise_refiner." in k for k in saved) and any(".context_refiner." in k for k in saved)

    pipe = ZImagePipeline(**tiny_components(seed=0))
    base = _forward(pipe.transformer)
    pipe.load_lora_weights(tmp_path)
    live = {n: p for n, p in pipe.transformer.named_parameters() if "lora_" in n}
    assert len(live) == len(saved) > 0 and all(p.abs().sum() > 0 for p in live.values())
    reloaded = _forward(pipe.transformer)
    assert not torch.allclose(reloaded, base)
    torch.testing.assert_close(reloaded, expected, rtol=1e-5, atol=1e-5)


def test_usage_snippet_card_and_license():
    card = get_family("zimage").card
    cfg = zimage_cfg(pretrained_model_name_or_path="Tongyi-MAI/Z-Image", validation_prompt='a "cat"')
    snippet = card.usage_snippet(cfg, "me/adapter")
    assert 'pipe.load_lora_weights("me/adapter")' in snippet and '"a \\"cat\\""' in snippet
    compile(snippet, "snippet", "exec")
    assert card.card_settings(cfg) == {"timestep_sampling": "uniform", "max_sequence_length": 512}
    assert card.base_model_license(cfg.model) == "apache-2.0" and card.base_model_license(zimage_cfg().model) is None
