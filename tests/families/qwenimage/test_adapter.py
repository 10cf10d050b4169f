"""families/qwenimage/adapter.py: the adapter saved by QwenImagePipeline's saver loads into the stock pipeline with
every LoRA module live and the trained model's output; the model card's snippet, settings and license."""

from __future__ import annotations

import os

import pytest
import torch
from diffusers import QwenImagePipeline, QwenImageTransformer2DModel
from peft import LoraConfig
from peft.utils import get_peft_model_state_dict
from safetensors.torch import load_file

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
    assert spec.card.base_model_license(cfg.model) is None
    hub = TrainConfig.for_family("qwenimage", pretrained_model_name_or_path="Qwen/Qwen-Image")
    assert spec.card.base_model_license(hub.model) == "apache-2.0"


def test_comfyuis_own_loader_applies_every_tensor_at_the_trained_strength(tiny_qwenimage, tmp_path):
    """ComfyUI's LoraLoader path (``model_lora_keys_unet`` + ``load_lora`` + the patcher) on its QwenImage model of
    the tiny demo's widths takes the diffusers-named file as saved: every tensor mapped (``transformer.<name>``),
    each weight's applied update = the file's B @ A = the trained (alpha / r) B @ A."""
    loader = pytest.importorskip("comfyui_loader")  # tests/support/comfyui_loader.py (DIT_LORA_COMFYUI=/tmp/comfyui)
    if not os.environ.get("DIT_LORA_COMFYUI"):
        pytest.skip("DIT_LORA_COMFYUI is not set (a ComfyUI checkout): ComfyUI's loader is not run")
    trained = QwenImageTransformer2DModel.from_pretrained(tiny_qwenimage, subfolder="transformer",
                                                          torch_dtype=torch.float32)
    linears = sorted(n for n, m in trained.named_modules() if isinstance(m, torch.nn.Linear))  # every Linear
    config = LoraConfig(r=4, lora_alpha=6, target_modules=linears, init_lora_weights=False)
    trained.add_adapter(config)
    state, lora_config = fold_lora_scale(dict(get_peft_model_state_dict(trained)),
                                         config.to_dict() | {"target_modules": sorted(config.target_modules)})
    path = get_family("qwenimage").adapter.save_adapter(tmp_path, state, lora_config)
    tiny = trained.config
    result = loader.load_in_comfyui(path, model_class="QwenImage", unet_config=dict(
        image_model="qwen_image", in_channels=tiny.in_channels, out_channels=tiny.out_channels,
        num_layers=tiny.num_layers, attention_head_dim=tiny.attention_head_dim,
        num_attention_heads=tiny.num_attention_heads, joint_attention_dim=tiny.joint_attention_dim,
        axes_dims_rope=tuple(tiny.axes_dims_rope)))
    saved = load_file(str(path))
    assert result.unloaded == [] and result.not_patched == [] and len(saved) > 40
    expected = loader.expected_deltas(saved, result)
    assert sorted(expected) == sorted(result.deltas) and len(expected) == len(saved) // 2
    live = {n: m for n, m in trained.named_modules() if hasattr(m, "lora_A") and "default" in m.lora_A}
    for module, layer in live.items():
        target = result.targets[f"transformer.{module}"][0]
        torch.testing.assert_close(result.deltas[target], expected[target], atol=1e-5, rtol=1e-5)
        trained_update = 6 / 4 * layer.lora_B["default"].weight @ layer.lora_A["default"].weight
        torch.testing.assert_close(result.deltas[target], trained_update.detach(), atol=1e-5, rtol=1e-5)


def test_the_edit_cards_pipeline_loads_without_torchvision(tmp_path):
    """The Edit card's lines up to the call run as written where torchvision is missing (the base install): its
    ``processor=dit_lora.load_edit_processor(base)`` stands for the processor transformers refuses to build; the call
    is the one training's validation makes (its VAE encode of a 1024 x 1024 area is too slow to run here)."""
    from dit_lora.families.qwenimage.demo import build_tiny_qwenimage_pipeline

    base = build_tiny_qwenimage_pipeline(tmp_path / "edit", variant="edit_plus")
    cfg = TrainConfig.for_family("qwenimage_edit_plus", pretrained_model_name_or_path=str(base),
                                 validation_prompt="make it red")
    snippet = get_family("qwenimage_edit_plus").card.usage_snippet(cfg, "me/adapter")
    assert "processor=load_edit_processor(base)" in snippet and "image=[image]" in snippet and "prompt=" in snippet
    namespace: dict = {}
    exec(compile(snippet[: snippet.index("pipe.load_lora_weights(")], "card", "exec"), namespace)
    pipe = namespace["pipe"]
    assert type(pipe.processor).__name__ == "Qwen2VLProcessor" and pipe.processor.image_processor is not None
