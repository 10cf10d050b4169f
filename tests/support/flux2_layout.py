"""FLUX.2 checkpoint folders laid out as the Hub has them, built offline from the catalogue's configs
(``dit_lora/families/flux2/catalogue.json``), in the manner of ``real_layout.py``.

- :func:`klein_pipeline`: a klein repo (default ``FLUX.2-klein-base-4B``) to train: every published config, the
  transformer at its real widths and heads (3072 wide, 24 heads, ``joint_attention_dim`` 7680, 128 latent
  channels) cut to one double and one single block, in bf16; the VAE with its published 4 stages, 32 latent
  channels and batch-norm statistics but 32-channel stages and one layer each (fp32); Qwen3 at its real width
  (2560, 32 heads, 8 KV heads) with one layer and the local tokenizer's vocabulary (bf16); Qwen2's tokenizer file
  set trained locally on the demo words, with Qwen3's chat format.
- :func:`dev_configs`: FLUX.2 [dev]'s folder of configs alone (a 32B transformer and a 24B text encoder cannot be
  built on a CPU, even one block deep: 2.2B parameters): what ``dit-lora plan`` and the family inference read.
"""

from __future__ import annotations

import json
from pathlib import Path

import torch
from real_layout import _built_in, write_configs

from dit_lora.catalogue import by_hub_id

KLEIN_BASE_4B = "black-forest-labs/FLUX.2-klein-base-4B"
DEV = "black-forest-labs/FLUX.2-dev"


def qwen3_tokenizer_folder(folder: Path) -> int:
    """The klein repos' ``tokenizer/`` file set (``vocab.json``, ``merges.txt``, ``tokenizer.json``,
    ``tokenizer_config.json`` with Qwen3's chat format, ``added_tokens.json``, ``special_tokens_map.json``) of a
    Qwen2 tokenizer trained on the demo words; returns its length (the text encoder's vocabulary)."""
    from dit_lora.families.flux2.demo import build_qwen_tokenizer

    tokenizer = build_qwen_tokenizer()
    tokenizer.save_pretrained(folder)
    backend = json.loads((folder / "tokenizer.json").read_text())["model"]
    (folder / "vocab.json").write_text(json.dumps(backend["vocab"], ensure_ascii=False))
    merges = [m if isinstance(m, str) else " ".join(m) for m in backend["merges"]]
    (folder / "merges.txt").write_text("#version: 0.2\n" + "".join(f"{m}\n" for m in merges), encoding="utf-8")
    added = {t: tokenizer.convert_tokens_to_ids(t) for t in tokenizer.all_special_tokens}
    (folder / "added_tokens.json").write_text(json.dumps(dict(sorted(added.items(), key=lambda kv: kv[1]))))
    if not (folder / "special_tokens_map.json").exists():
        (folder / "special_tokens_map.json").write_text(json.dumps({
            "additional_special_tokens": ["<|im_start|>", "<|im_end|>", "<think>", "</think>"],
            "eos_token": "<|endoftext|>", "pad_token": "<|endoftext|>"}))
    return len(tokenizer)


def klein_pipeline(root: Path, hub_id: str = KLEIN_BASE_4B, layers: int = 1) -> Path:
    """A klein repo as the Hub lays it out (see the module docstring); ``layers`` double and single blocks."""
    from diffusers import AutoencoderKLFlux2, Flux2Transformer2DModel
    from transformers import Qwen3Config, Qwen3ForCausalLM

    entry = by_hub_id(hub_id)
    folder = write_configs(hub_id, root / hub_id.split("/")[-1])  # model_index.json, scheduler and the rest
    config = {**entry.configs["transformer/config.json"], "num_layers": layers, "num_single_layers": layers}
    _built_in(torch.bfloat16, 0, lambda: Flux2Transformer2DModel.from_config(config)).save_pretrained(
        folder / "transformer")
    narrow = {"block_out_channels": [32, 32, 32, 32], "layers_per_block": 1}
    vae = AutoencoderKLFlux2.from_config({**entry.configs["vae/config.json"], **narrow})
    with torch.no_grad():  # published statistics are not 0 and 1: the normalisation must be exercised
        vae.bn.running_mean.copy_(torch.linspace(-0.2, 0.2, vae.bn.num_features))
        vae.bn.running_var.copy_(torch.linspace(0.5, 2.0, vae.bn.num_features))
    vae.save_pretrained(folder / "vae")
    vocab = qwen3_tokenizer_folder(folder / "tokenizer")
    text = {k: v for k, v in entry.configs["text_encoder/config.json"].items() if k not in ("architectures", "model_type")}
    text.update(num_hidden_layers=1, vocab_size=-(-vocab // 64) * 64, bos_token_id=None, eos_token_id=None)
    _built_in(torch.bfloat16, 1, lambda: Qwen3ForCausalLM(Qwen3Config(**text))).save_pretrained(
        folder / "text_encoder")
    return folder


def dev_configs(root: Path) -> Path:
    """FLUX.2 [dev]'s published configs in its folder layout, no weights."""
    return write_configs(DEV, root / "FLUX.2-dev")
