"""Checkpoint folders laid out exactly as the Hub has them, built offline from the catalogue's configs.

Real widths, head counts, scheduler and tokenizer file sets; only the depth is cut (and the vocabulary, which a
locally trained tokenizer sets) so a CPU can train them; random weights, saved as safetensors. Tokenizers are
trained here with ``sentencepiece`` / ``tokenizers`` and written in the Hub's file set: CogVideoX's T5 folder
holds ``spiece.model`` and no ``tokenizer.json``; Sana's Gemma folder holds both.
"""

from __future__ import annotations

import io
import json
import sys
from pathlib import Path

import torch

from dit_lora.catalogue import by_hub_id

CORPUS = [
    "a red square on a dark background", "a green circle", "a blue triangle moving left to right",
    "a yellow square moving top to bottom", "a photo of a cat", "an orange shape in the middle of the frame",
] * 20


def sentencepiece_model(vocab_size: int = 96) -> bytes:
    """A small unigram SentencePiece model (T5's ids: pad 0, eos 1, unk 2)."""
    import sentencepiece

    out = io.BytesIO()
    sentencepiece.SentencePieceTrainer.train(
        sentence_iterator=iter(CORPUS), model_writer=out, vocab_size=vocab_size, hard_vocab_limit=False,
        pad_id=0, eos_id=1, unk_id=2, bos_id=-1, minloglevel=2,
    )
    return out.getvalue()


def t5_tokenizer_folder(folder: Path, max_length: int = 226) -> Path:
    """CogVideoX's tokenizer/ as the Hub has it: spiece.model plus JSON, no tokenizer.json."""
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "spiece.model").write_bytes(sentencepiece_model())
    (folder / "tokenizer_config.json").write_text(json.dumps({
        "tokenizer_class": "T5Tokenizer", "model_max_length": max_length, "extra_ids": 0, "pad_token": "<pad>",
        "eos_token": "</s>", "unk_token": "<unk>"}))
    (folder / "special_tokens_map.json").write_text(json.dumps(
        {"pad_token": "<pad>", "eos_token": "</s>", "unk_token": "<unk>"}))
    (folder / "added_tokens.json").write_text("{}")
    return folder


def gemma_tokenizer_folder(folder: Path) -> Path:
    """Sana's tokenizer/ as the Hub has it: tokenizer.model, tokenizer.json, tokenizer_config.json and
    special_tokens_map.json (GemmaTokenizerFast converted from a local SentencePiece model)."""
    from transformers import GemmaTokenizerFast

    folder.mkdir(parents=True, exist_ok=True)
    model = folder / "tokenizer.model"
    model.write_bytes(sentencepiece_model())
    tokenizer = GemmaTokenizerFast(vocab_file=str(model), pad_token="<pad>", eos_token="</s>", unk_token="<unk>",
                                   bos_token="<unk>")
    tokenizer.save_pretrained(folder)
    return folder


def write_configs(hub_id: str, folder: Path, **changes: dict) -> Path:
    """Every config the catalogue records for ``hub_id``; ``changes`` maps a file key to values to replace."""
    for file, config in by_hub_id(hub_id).configs.items():
        path = folder / file
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps({**config, **changes.get(file, {})}, indent=1))
    return folder


class Blocked:
    """A ``sys.meta_path`` finder that makes ``import <name>`` fail, as on a machine without the package."""

    def __init__(self, *names: str) -> None:
        self.names = set(names)

    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in self.names:
            raise ModuleNotFoundError(f"No module named '{name}'", name=name)
        return None


def block_packages(monkeypatch, *names: str) -> None:
    """Hide installed packages from this process for one test (imports and find_spec both fail)."""
    for module in list(sys.modules):
        if module.split(".")[0] in names:
            monkeypatch.delitem(sys.modules, module)
    monkeypatch.setattr(sys, "meta_path", [Blocked(*names), *sys.meta_path])


def random_weights(model: torch.nn.Module, seed: int = 0) -> torch.nn.Module:
    """Small random weights (the libraries' own init can leave zero-initialised output layers)."""
    generator = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in model.parameters():
            p.copy_(torch.randn(p.shape, generator=generator) * 0.02)
    return model


def _folder(root: Path, hub_id: str) -> Path:
    folder = root / hub_id.split("/")[-1]
    write_configs(hub_id, folder)  # model_index.json, scheduler and the rest as published
    return folder


def _text_encoder(config: dict, **changes):
    from transformers import AutoConfig, AutoModel

    return AutoModel.from_config(AutoConfig.for_model(**{**config, **changes}))


def sana_pipeline(root: Path, hub_id: str = "Efficient-Large-Model/Sana_600M_1024px_diffusers", layers: int = 1) -> Path:
    """Sana as the Hub lays it out: the published transformer (real widths and heads, ``layers`` deep, fp32 main
    files), the DC-AE with its published stages, latent channels and compression but narrow channels and one
    layer per stage, Gemma-2 (real widths, one layer, the local tokenizer's vocabulary) in bf16, and the
    GemmaTokenizerFast file set."""
    from diffusers import AutoencoderDC, SanaTransformer2DModel

    entry = by_hub_id(hub_id)
    folder = _folder(root, hub_id)
    SanaTransformer2DModel.from_config({**entry.configs["transformer/config.json"], "num_layers": layers}) \
        .save_pretrained(folder / "transformer")
    narrow = {"encoder_block_out_channels": [8, 8, 8, 32, 32, 32], "decoder_block_out_channels": [8, 8, 8, 32, 32, 32],
              "encoder_layers_per_block": [1] * 6, "decoder_layers_per_block": [1] * 6}
    AutoencoderDC.from_config({**entry.configs["vae/config.json"], **narrow}).save_pretrained(folder / "vae")
    tokenizer = gemma_tokenizer_folder(folder / "tokenizer")
    from transformers import AutoTokenizer

    vocab = len(AutoTokenizer.from_pretrained(tokenizer))
    _text_encoder(entry.configs["text_encoder/config.json"], num_hidden_layers=1, vocab_size=vocab) \
        .to(torch.bfloat16).save_pretrained(folder / "text_encoder")
    return folder


def cogvideox_pipeline(root: Path, hub_id: str = "THUDM/CogVideoX-5b", layers: int = 1) -> Path:
    """CogVideoX as the Hub lays it out: the published transformer (real widths and heads, ``layers`` deep, bf16),
    the VAE with its published stages and compression but narrow channels and one layer per block (fp32, as
    uploaded), T5-XXL's widths with one layer in bf16, and the spiece.model-only tokenizer folder."""
    from diffusers import AutoencoderKLCogVideoX, CogVideoXTransformer3DModel

    entry = by_hub_id(hub_id)
    folder = _folder(root, hub_id)
    CogVideoXTransformer3DModel.from_config({**entry.configs["transformer/config.json"], "num_layers": layers}) \
        .to(torch.bfloat16).save_pretrained(folder / "transformer")
    AutoencoderKLCogVideoX.from_config({**entry.configs["vae/config.json"], "block_out_channels": [32, 32, 32, 32],
                                        "layers_per_block": 1}).save_pretrained(folder / "vae")
    t5_tokenizer_folder(folder / "tokenizer")
    _text_encoder(entry.configs["text_encoder/config.json"], num_layers=1, vocab_size=128) \
        .to(torch.bfloat16).save_pretrained(folder / "text_encoder")
    return folder


def dit_pipeline(root: Path, hub_id: str = "facebook/DiT-XL-2-256", layers: int = 1,
                 labels: dict[str, str] | None = None) -> Path:
    """DiT-XL/2 as the Hub lays it out (the legacy ``Transformer2DModel`` config name, 1000 classes, real widths,
    ``layers`` deep; the SD VAE with its published widths and one layer per block), with ``id2label`` in
    model_index.json: ImageNet's synonym strings for the ``labels`` given, placeholders for the rest. Weights in
    safetensors (the Hub's main branch has pickle files only, which dit-lora refuses)."""
    from diffusers import AutoencoderKL, DiTTransformer2DModel

    entry = by_hub_id(hub_id)
    folder = _folder(root, hub_id)
    transformer = entry.configs["transformer/config.json"]
    DiTTransformer2DModel.from_config({**transformer, "num_layers": layers}).save_pretrained(folder / "transformer")
    config = json.loads((folder / "transformer" / "config.json").read_text())
    config["_class_name"] = "Transformer2DModel"  # as published; diffusers remaps it for ada_norm_zero
    (folder / "transformer" / "config.json").write_text(json.dumps(config))
    AutoencoderKL.from_config({**entry.configs["vae/config.json"], "layers_per_block": 1}).save_pretrained(folder / "vae")
    index = json.loads((folder / "model_index.json").read_text())
    index["id2label"] = {str(i): (labels or {}).get(str(i), f"class number {i}") for i in range(1000)}
    (folder / "model_index.json").write_text(json.dumps(index))
    return folder
