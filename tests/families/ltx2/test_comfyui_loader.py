"""LTX-2's ComfyUI file in ComfyUI's own loader (tests/support/comfyui_loader.py runs ComfyUI's ``LoraLoader`` path on
its ``LTXAV`` model, Lightricks' layout): every tensor of ``pytorch_lora_weights_comfyui.safetensors`` is taken, every
module patched, and each weight's applied update is the file's B·A (dit-lora folds alpha/r into lora_B); one module
(an audio-to-video attention projection) is also checked against the trained model's own (alpha/r)·B·A, and every
LoRA module of the model reached a weight; the diffusers-named adapter loads nothing there. Runs where ``DIT_LORA_COMFYUI`` names a
ComfyUI checkout (never in CI)."""

from __future__ import annotations

import pytest
import torch

from dit_lora.families.ltx2.demo import DEMO

loader = pytest.importorskip("comfyui_loader")  # the harness (tests/support/comfyui_loader.py)
pytestmark = loader.comfyui

RANK, ALPHA = 4, 8
TARGETS = r".*"  # every Linear of the audio and video halves, their cross-modal attention, embedders and modulations


def _tiny_transformer():
    from diffusers import LTX2VideoTransformer3DModel

    torch.manual_seed(0)
    return LTX2VideoTransformer3DModel(**{**DEMO.read().value("transformer"), "num_layers": 2})


def _unet(config) -> dict:
    """ComfyUI's LTXAV constructor arguments at the demo's widths (model_detection reads these from a checkpoint)."""
    return dict(image_model="ltxav", in_channels=config.in_channels, audio_in_channels=config.audio_in_channels,
                cross_attention_dim=config.cross_attention_dim,
                audio_cross_attention_dim=config.audio_cross_attention_dim,
                attention_head_dim=config.attention_head_dim, audio_attention_head_dim=config.audio_attention_head_dim,
                num_attention_heads=config.num_attention_heads,
                audio_num_attention_heads=config.audio_num_attention_heads,
                caption_channels=config.caption_channels, num_layers=config.num_layers,
                vae_scale_factors=list(config.vae_scale_factors))


def test_comfyuis_own_loader_applies_the_comfyui_file_at_the_trained_strength(tmp_path):
    from peft.tuners.lora import LoraLayer
    from safetensors.torch import load_file, save_file

    from dit_lora.families.ltx2.comfyui import EXPORTS

    model = _tiny_transformer()
    linears = [n for n, m in model.named_modules() if isinstance(m, torch.nn.Linear)]
    targets = "|".join(n.replace(".", r"\.") for n in linears)
    diffusers_file = tmp_path / "diffusers"
    diffusers_file.mkdir()
    path = loader.save_random_adapter(model, "ltx2", f"^({targets})$", diffusers_file, rank=RANK, alpha=ALPHA)
    comfy_file = tmp_path / "pytorch_lora_weights_comfyui.safetensors"
    save_file(EXPORTS.comfyui_state(load_file(str(path))), str(comfy_file))
    result, expected = loader.check_in_comfyui(comfy_file, unet_config=_unet(model.config), model_class="LTXAV")
    # every LoRA module of the trained model reached a weight
    live = [n for n, m in model.named_modules() if isinstance(m, LoraLayer)]
    assert len(result.targets) == len(live) == len(linears)
    attn = model.transformer_blocks[1].audio_to_video_attn.to_q
    trained = ALPHA / RANK * attn.lora_B["default"].weight @ attn.lora_A["default"].weight
    torch.testing.assert_close(result.deltas["diffusion_model.transformer_blocks.1.audio_to_video_attn.to_q.weight"],
                               trained, atol=1e-5, rtol=1e-5)
    # the diffusers-named file: nothing of it is ComfyUI's
    plain = loader.load_in_comfyui(path, unet_config=_unet(model.config), model_class="LTXAV")
    assert plain.targets == {} and len(plain.unloaded) == len(load_file(str(path)))
