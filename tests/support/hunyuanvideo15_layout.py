"""HunyuanVideo 1.5 checkpoint folders as the Hub lays them out (``hunyuanvideo-community/HunyuanVideo-1.5-Diffusers-*``),
rebuilt offline from the catalogue's configs.

The published ``model_index.json``, scheduler, transformer and VAE configs; the transformer at its real widths (16
heads x 128 = 2048, 65 input channels, Qwen 3584 / ByT5 1472 / SigLIP 1152 inputs, two refiner layers) cut to one
block; the VAE at its published 32 latent channels and 16x / 4x compression, its stages 8 to 64 channels wide (the
last twice the latent channels, as its encoder groups them) with one residual block each. The text encoders at their
model widths: Qwen2.5-VL-7B's language model (3584 wide, 28 heads, 4 kv heads) cut to two layers (the pipelines read
``hidden_states[-3]``) with a 64-wide MLP and the demo's byte-level BPE vocabulary (a few hundred rows instead of
152064); ByT5's encoder (1472 wide, 6 heads) cut to one layer with a 64-wide feed-forward; for image-to-video SigLIP
(1152 wide, 16 heads, 384 px in 14 px patches: 729 tokens) with one layer. Random weights
(layout_weights.quick_init), bf16 as the Hub stores them, the VAE fp32; the guider as the conversion script writes
it.
"""

from __future__ import annotations

import json
from pathlib import Path

import torch
from layout_weights import _built_in
from real_layout import write_configs

from dit_lora.catalogue import by_hub_id

T2V, I2V = (f"hunyuanvideo-community/HunyuanVideo-1.5-Diffusers-480p_{task}" for task in ("t2v", "i2v"))
#: the VAE's stages, narrowed (published: 128, 256, 512, 1024, 1024 with two residual blocks each)
NARROW_VAE = {"block_out_channels": [8, 16, 32, 64, 64], "layers_per_block": 1}


def _save(module, folder: Path, published: dict, **kept) -> None:
    """``module`` saved, then its config.json put back as published with ``kept`` (what the layout cut)."""
    module.save_pretrained(folder)
    (folder / "config.json").write_text(json.dumps({**published, **kept}, indent=1))


def _text_encoders(folder: Path, entry) -> None:
    """Qwen2.5-VL's language model and ByT5's encoder at their widths, one layer each, with their tokenizers."""
    from transformers import ByT5Tokenizer, Qwen2_5_VLTextConfig, Qwen2_5_VLTextModel, T5Config, T5EncoderModel

    from dit_lora.families.hunyuanvideo15.demo import build_tiny_qwen_tokenizer

    tokenizer = build_tiny_qwen_tokenizer()
    tokenizer.save_pretrained(folder / "tokenizer")
    ByT5Tokenizer().save_pretrained(folder / "tokenizer_2")
    qwen = {k: v for k, v in entry.configs["text_encoder/config.json"].items() if k not in ("architectures", "model_type")}
    qwen.update(num_hidden_layers=2, intermediate_size=64,  # the pipelines read hidden_states[-3]
                vocab_size=-(-len(tokenizer) // 64) * 64)
    byt5 = {k: v for k, v in entry.configs["text_encoder_2/config.json"].items() if k not in ("architectures", "model_type")}
    byt5.update(num_layers=1, d_ff=64)
    _built_in(torch.bfloat16, 3, lambda: Qwen2_5_VLTextModel(Qwen2_5_VLTextConfig(**qwen))).save_pretrained(
        folder / "text_encoder"
    )
    _built_in(torch.bfloat16, 4, lambda: T5EncoderModel(T5Config(**byt5))).save_pretrained(folder / "text_encoder_2")


def _image_encoder(folder: Path, entry) -> None:
    """SigLIP at its width, one layer, and its processor at the published 384 px."""
    from transformers import SiglipImageProcessor, SiglipVisionConfig, SiglipVisionModel

    siglip = {k: v for k, v in entry.configs["image_encoder/config.json"].items() if k not in ("architectures", "model_type")}
    siglip.update(num_hidden_layers=1)
    _built_in(torch.float32, 5, lambda: SiglipVisionModel(SiglipVisionConfig(**siglip))).save_pretrained(
        folder / "image_encoder"
    )
    SiglipImageProcessor(size={"height": 384, "width": 384}).save_pretrained(folder / "feature_extractor")


def hunyuanvideo15_pipeline(root: Path, hub_id: str = T2V, layers: int = 1) -> Path:
    """The Hub layout of ``hub_id`` (a catalogued HunyuanVideo 1.5 release) under ``root`` (the module docstring)."""
    from diffusers import AutoencoderKLHunyuanVideo15, HunyuanVideo15Transformer3DModel

    entry = by_hub_id(hub_id)
    folder = write_configs(hub_id, root / hub_id.split("/")[-1])
    tr = entry.configs["transformer/config.json"]
    transformer = _built_in(torch.bfloat16, 1, lambda: HunyuanVideo15Transformer3DModel.from_config({**tr, "num_layers": layers}))
    _save(transformer, folder / "transformer", tr, num_layers=layers)
    del transformer
    vae = entry.configs["vae/config.json"]
    _save(_built_in(torch.float32, 2, lambda: AutoencoderKLHunyuanVideo15.from_config({**vae, **NARROW_VAE})),
          folder / "vae", vae, **NARROW_VAE)  # fmt: skip
    _text_encoders(folder, entry)
    if "image_encoder/config.json" in entry.configs:
        _image_encoder(folder, entry)
    guider = {"_class_name": "ClassifierFreeGuidance", "guidance_scale": 6.0}
    (folder / "guider").mkdir(exist_ok=True)
    (folder / "guider" / "guider_config.json").write_text(json.dumps(guider, indent=1))
    return folder
