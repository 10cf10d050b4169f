"""families/qwenimage/adapter.py: the adapter saved by QwenImagePipeline's saver loads into the stock pipeline with
every LoRA module live and the trained model's output; the model card's snippet, settings and license."""

from __future__ import annotations

import torch
from diffusers import QwenImagePipeline, QwenImageTransformer2DModel
from peft import LoraConfig
from peft.utils import get_peft_model_state_dict

from dit_lora.config import TrainConfig
from dit_lora.output.adapter import fold_lora_scale
from dit_lora.registry import get_family


def _inputs(model):
    gen = torch.Generator().manual_seed(0)
    return {"hidden_states": torch.randn(1, 16, model.config.in_channels, generator=gen),
            "encoder_hidden_states": torch.randn(1, 7, model.config.joint_attention_dim, generator=gen),
            "encoder_hidden_states_mask": torch.ones(1, 7, dtype=torch.long), "timestep": torch.tensor([0.6]),
            "img_shapes": [(1, 4, 4)], "return_dict": False}


def test_saved_adapter_reloads_live_at_the_trained_strength(tiny_qwenimage, tmp_path):
    spec = get_family("qwenimage")
    trained = QwenImageTransformer2DModel.from_pretrained(tiny_qwenimage, subfolder="transformer",
                                                          torch_dtype=torch.float32)
    config = LoraConfig(r=4, lora_alpha=8, target_modules=list(spec.info.default_lora_layers), init_lora_weights=False)
    trained.add_adapter(config)
    with torch.no_grad():
        expected = trained(**_inputs(trained))[0]
    state = {k: v for k, v in get_peft_model_state_dict(trained).items()}
    state, lora_config = fold_lora_scale(state, config.to_dict() | {"target_modules": sorted(config.target_modules)})
    path = spec.adapter.save_adapter(tmp_path, state, lora_config)
    assert path.name == spec.info.adapter_weight_name

    pipe = QwenImagePipeline.from_pretrained(tiny_qwenimage, torch_dtype=torch.float32)
    pipe.load_lora_weights(tmp_path)
    live = [n for n, m in pipe.transformer.named_modules() if hasattr(m, "lora_B") and "default_0" in m.lora_B]
    assert len(live) == len(state) // 2 > 0
    assert all(m.lora_B["default_0"].weight.abs().sum() > 0 for n, m in pipe.transformer.named_modules() if n in live)
    with torch.no_grad():
        got = pipe.transformer(**_inputs(pipe.transformer))[0]
    torch.testing.assert_close(got, expected, rtol=1e-5, atol=1e-5)


def test_card_snippet_settings_and_license(tiny_qwenimage):
    spec = get_family("qwenimage")
    cfg = TrainConfig.for_family("qwenimage", pretrained_model_name_or_path=str(tiny_qwenimage),
                                 mixed_precision="no", validation_prompt='a "cat"')
    snippet = spec.card.usage_snippet(cfg, "me/adapter")
    assert 'pipe.load_lora_weights("me/adapter")' in snippet and '"a \\"cat\\""' in snippet
    compile(snippet, "snippet", "exec")
    assert spec.card.card_settings(cfg) == {"weighting_scheme": "logit_normal", "qwen_shift_mode": "dynamic",
                                            "max_sequence_length": 512}
    assert spec.card.base_model_license(cfg) is None
    hub = TrainConfig.for_family("qwenimage", pretrained_model_name_or_path="Qwen/Qwen-Image")
    assert spec.card.base_model_license(hub) == "apache-2.0"
