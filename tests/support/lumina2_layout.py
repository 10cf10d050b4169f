"""Lumina-Image 2.0's checkpoint folder laid out as the Hub has it, built offline from the catalogue's configs
(``dit_lora/families/lumina2/catalogue.json``), in the manner of ``flux_layout.py``: every published config; the
transformer at its real widths and heads (2304 wide, 24 query and 8 key/value heads, captions 2304 wide) cut to one
joint block and one block of each refiner, in bf16; the FLUX.1 VAE with its published 16 latent channels, scale and
shift but narrow stages (fp32); Gemma-2-2B's model width in one narrow layer (bf16) with the local Gemma tokenizer's
file set. And the transformer as the original single file (``consolidated.00-of-01.pth``'s names in safetensors,
the file ComfyUI users hold): :func:`native_state_dict`, diffusers' ``convert_lumina2_to_diffusers`` read backwards
(q, k and v fused by concatenation); the test checks diffusers' converter takes it back to the same tensors."""

from __future__ import annotations

from pathlib import Path

import torch
from layout_weights import NARROW_GEMMA2, _built_in
from real_layout import _text_encoder, gemma_tokenizer_folder, write_configs

from dit_lora.catalogue import by_hub_id

HUB_ID = "Alpha-VLLM/Lumina-Image-2.0"
#: diffusers name -> original name of the tensors outside the blocks (a prefix of the key)
TOP = (
    ("time_caption_embed.caption_embedder.", "cap_embedder."),
    ("time_caption_embed.timestep_embedder.linear_1.", "t_embedder.mlp.0."),
    ("time_caption_embed.timestep_embedder.linear_2.", "t_embedder.mlp.2."),
    ("norm_out.linear_1.", "final_layer.adaLN_modulation.1."),
    ("norm_out.linear_2.", "final_layer.linear."),
)
#: inside a block: diffusers name -> original name (a prefix of the rest of the key, tried in this order)
BLOCK = (
    ("attn.to_out.0.", "attention.out."),
    ("attn.norm_q.", "attention.q_norm."),
    ("attn.norm_k.", "attention.k_norm."),
    ("feed_forward.linear_1.", "feed_forward.w1."),
    ("feed_forward.linear_2.", "feed_forward.w2."),
    ("feed_forward.linear_3.", "feed_forward.w3."),
    ("norm1.linear.", "adaLN_modulation.1."),
    ("norm1.norm.", "attention_norm1."),
    ("norm1.", "attention_norm1."),  # the context refiner's unmodulated norm
    ("norm2.", "attention_norm2."),
)
BLOCK_LISTS = ("layers", "noise_refiner", "context_refiner")


def lumina2_pipeline(root: Path) -> Path:
    """Lumina-Image 2.0's repo as the Hub lays it out (see the module docstring)."""
    from diffusers import AutoencoderKL, Lumina2Transformer2DModel
    from transformers import AutoTokenizer

    entry = by_hub_id(HUB_ID)
    folder = write_configs(HUB_ID, root / "Lumina-Image-2.0")
    config = {**entry.configs["transformer/config.json"], "num_layers": 1, "num_refiner_layers": 1}
    _built_in(torch.bfloat16, 0, lambda: Lumina2Transformer2DModel.from_config(config)).save_pretrained(
        folder / "transformer")
    narrow = {"block_out_channels": [32, 32, 32, 32], "layers_per_block": 1, "norm_num_groups": 32}
    AutoencoderKL.from_config({**entry.configs["vae/config.json"], **narrow}).save_pretrained(folder / "vae")
    tokenizer = gemma_tokenizer_folder(folder / "tokenizer")
    vocab = len(AutoTokenizer.from_pretrained(tokenizer))
    _text_encoder(entry.configs["text_encoder/config.json"], num_hidden_layers=1, vocab_size=vocab,
                  **NARROW_GEMMA2).to(torch.bfloat16).save_pretrained(folder / "text_encoder")
    return folder


def _native_key(key: str) -> str:
    for ours, theirs in TOP:
        if key.startswith(ours):
            return theirs + key[len(ours):]
    block, _, rest = key.partition(".")
    if block in BLOCK_LISTS:
        index, _, rest = rest.partition(".")
        for ours, theirs in BLOCK:
            if rest.startswith(ours):
                return f"{block}.{index}.{theirs}{rest[len(ours):]}"
    return key


def native_state_dict(state: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """A ``Lumina2Transformer2DModel``'s state dict under the original checkpoint's names, each block's q, k and v
    fused into ``attention.qkv``."""
    out: dict[str, torch.Tensor] = {}
    for key, tensor in state.items():
        if ".attn.to_q." in key:
            parts = [state[key.replace(".to_q.", f".to_{p}.")] for p in "qkv"]
            out[_native_key(key.replace(".attn.to_q.", ".attention.qkv."))] = torch.cat(parts)
        elif ".attn.to_k." not in key and ".attn.to_v." not in key:
            out[_native_key(key)] = tensor
    return out


def write_native_file(transformer_folder: Path, path: Path, prefix: str = "") -> Path:
    """The folder's transformer as the original single file at ``path`` (keys behind ``prefix``: ComfyUI's
    ``model.diffusion_model.``)."""
    from safetensors.torch import load_file, save_file

    state = load_file(str(transformer_folder / "diffusion_pytorch_model.safetensors"))
    save_file({prefix + k: v.contiguous() for k, v in native_state_dict(state).items()}, str(path))
    return path
