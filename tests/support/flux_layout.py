"""FLUX.1 [dev]'s checkpoint folder laid out as the Hub has it, built offline from the catalogue's configs
(``dit_lora/families/flux/catalogue.json``), in the manner of ``flux2_layout.py``: every published config; the
transformer at its real widths and heads (3072 wide, 24 heads, ``joint_attention_dim`` 4096, pooled 768, the guidance
embedding) cut to one double and one single block, in bf16; the VAE with its published 16 latent channels, scale and
shift but 32-channel stages and one layer each (fp32); CLIP-L (768 wide) and T5-XXL (4096 wide) at one layer each,
their vocabularies the local tokenizers' (bf16); CLIP's and T5's tokenizers trained locally on the demo words."""

from __future__ import annotations

from pathlib import Path

import torch
from real_layout import _built_in, write_configs

from dit_lora.catalogue import by_hub_id

DEV = "black-forest-labs/FLUX.1-dev"


def dev_pipeline(root: Path) -> Path:
    """FLUX.1 [dev]'s repo as the Hub lays it out (see the module docstring)."""
    from diffusers import AutoencoderKL, FluxTransformer2DModel
    from transformers import CLIPTextConfig, CLIPTextModel, T5Config, T5EncoderModel

    from dit_lora.data.synthetic.tokenizers import build_tiny_t5_tokenizer
    from dit_lora.families.flux.demo import build_clip_tokenizer

    entry = by_hub_id(DEV)
    folder = write_configs(DEV, root / "FLUX.1-dev")
    config = {**entry.configs["transformer/config.json"], "num_layers": 1, "num_single_layers": 1}
    _built_in(torch.bfloat16, 0, lambda: FluxTransformer2DModel.from_config(config)).save_pretrained(
        folder / "transformer")
    narrow = {"block_out_channels": [32, 32, 32, 32], "layers_per_block": 1, "norm_num_groups": 32}
    AutoencoderKL.from_config({**entry.configs["vae/config.json"], **narrow}).save_pretrained(folder / "vae")
    clip_tokenizer, t5_tokenizer = build_clip_tokenizer(), build_tiny_t5_tokenizer()
    clip_tokenizer.save_pretrained(folder / "tokenizer")
    t5_tokenizer.save_pretrained(folder / "tokenizer_2")
    for sub, tokenizer, model, config_class in (("text_encoder", clip_tokenizer, CLIPTextModel, CLIPTextConfig),
                                                 ("text_encoder_2", t5_tokenizer, T5EncoderModel, T5Config)):
        values = {k: v for k, v in entry.configs[f"{sub}/config.json"].items() if k not in ("architectures", "model_type")}
        depth = "num_hidden_layers" if sub == "text_encoder" else "num_layers"
        ids = {"eos_token_id": tokenizer.eos_token_id, "pad_token_id": tokenizer.pad_token_id}
        if sub == "text_encoder":
            ids["bos_token_id"] = tokenizer.bos_token_id
        values.update({depth: 1, "vocab_size": -(-len(tokenizer) // 64) * 64, **ids})
        _built_in(torch.bfloat16, 1, lambda: model(config_class(**values))).save_pretrained(folder / sub)
    return folder
