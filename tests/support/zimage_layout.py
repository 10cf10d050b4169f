"""Z-Image test support: a run config built in code, the tiny demo components, and Hub-layout folders of
Z-Image and Z-Image-Turbo rebuilt offline from the catalogue's configs.

A layout folder has the published ``model_index.json``, scheduler, transformer config (real widths, heads, RoPE
axes; one main layer and one refiner layer per stack instead of 30 and 2), the FLUX.1 VAE's published stages,
latent channels and latent statistics (narrow channels, one layer per block), Qwen3-4B's widths cut to one layer
with a locally trained tokenizer's vocabulary, and Qwen's tokenizer file set (``vocab.json``, ``merges.txt``,
``tokenizer.json``, ``tokenizer_config.json`` with the chat template); random weights, bf16 like the releases.
"""

from __future__ import annotations

import json
from pathlib import Path

import torch
from layout_weights import quick_init

from dit_lora.catalogue import by_hub_id
from dit_lora.config import TrainConfig

BASE, TURBO = "Tongyi-MAI/Z-Image", "Tongyi-MAI/Z-Image-Turbo"


def zimage_cfg(**values) -> TrainConfig:
    """A Z-Image config (nothing is read from it unless a test names a real folder)."""
    values = {"pretrained_model_name_or_path": "unused/zimage", "train_data_dir": "unused", "resolution": 64, **values}
    return TrainConfig.for_family("zimage", **values)


def tiny_components(seed: int = 0) -> dict:
    """The tiny demo pipeline's components in memory (fp32)."""
    from dit_lora.families.zimage.demo import build_tiny_zimage_components

    return build_tiny_zimage_components(seed)


def _write_configs(hub_id: str, folder: Path) -> None:
    for file, config in by_hub_id(hub_id).configs.items():
        path = folder / file
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(config, indent=1))


def qwen3_tokenizer_folder(folder: Path):
    """Qwen's tokenizer file set from the demo's locally trained byte-level BPE (Qwen3's special tokens and chat
    template); returns the tokenizer."""
    from dit_lora.families.zimage.demo import build_tiny_qwen3_tokenizer

    tokenizer = build_tiny_qwen3_tokenizer()
    tokenizer.save_pretrained(folder)
    # transformers 5 writes tokenizer.json and a chat_template.jinja; the Hub has vocab.json and merges.txt too,
    # and the template inside tokenizer_config.json
    model = json.loads((folder / "tokenizer.json").read_text())["model"]
    (folder / "vocab.json").write_text(json.dumps(model["vocab"], ensure_ascii=False))
    merges = [m if isinstance(m, str) else " ".join(m) for m in model["merges"]]
    (folder / "merges.txt").write_text("#version: 0.2\n" + "".join(f"{m}\n" for m in merges), encoding="utf-8")
    (folder / "chat_template.jinja").unlink(missing_ok=True)
    config = json.loads((folder / "tokenizer_config.json").read_text())
    config.update(tokenizer_class="Qwen2Tokenizer", chat_template=tokenizer.chat_template)
    (folder / "tokenizer_config.json").write_text(json.dumps(config, indent=1))
    return tokenizer


def zimage_pipeline(root: Path, hub_id: str = BASE, seed: int = 0) -> Path:
    """``hub_id``'s folder as the Hub lays it out (see the module docstring), under ``root``."""
    from diffusers import AutoencoderKL, ZImageTransformer2DModel
    from transformers import AutoConfig, AutoModel

    entry, folder = by_hub_id(hub_id), root / hub_id.split("/")[-1]
    _write_configs(hub_id, folder)
    with torch.random.fork_rng(devices=[]), quick_init(seed):  # layout_weights.quick_init: copies, not draws
        torch.manual_seed(seed)
        transformer = ZImageTransformer2DModel.from_config(
            {**entry.configs["transformer/config.json"], "n_layers": 1, "n_refiner_layers": 1}
        )
        torch.nn.Module.to(transformer, torch.bfloat16).save_pretrained(folder / "transformer")
        del transformer
        narrow = {"block_out_channels": [32, 32, 32, 32], "layers_per_block": 1}
        AutoencoderKL.from_config({**entry.configs["vae/config.json"], **narrow}).save_pretrained(folder / "vae")
        tokenizer = qwen3_tokenizer_folder(folder / "tokenizer")
        te = {k: v for k, v in entry.configs["text_encoder/config.json"].items() if k != "architectures"}
        te.update(num_hidden_layers=1, max_window_layers=1, vocab_size=-(-len(tokenizer) // 64) * 64,
                  bos_token_id=tokenizer.pad_token_id, eos_token_id=tokenizer.eos_token_id)
        AutoModel.from_config(AutoConfig.for_model(**te)).to(torch.bfloat16).save_pretrained(folder / "text_encoder")
    # save_pretrained rewrites config.json: keep the published files (the catalogue's signature reads them)
    for name in ("transformer", "vae"):
        published = entry.configs[f"{name}/config.json"]
        written = json.loads((folder / name / "config.json").read_text())
        keep = {"n_layers": 1, "n_refiner_layers": 1} if name == "transformer" else narrow
        (folder / name / "config.json").write_text(json.dumps({**published, **keep, "_diffusers_version":
                                                               written["_diffusers_version"]}, indent=1))
    return folder


def turbo_beside(base: Path) -> Path:
    """Z-Image-Turbo's folder next to a built base folder: the same architecture (its components linked), the
    Turbo scheduler (shift 3.0) and model index."""
    folder = base.parent / TURBO.split("/")[-1]
    _write_configs(TURBO, folder)
    for name in ("transformer", "vae", "text_encoder", "tokenizer"):
        target = folder / name
        for file in (base / name).iterdir():
            if not (target / file.name).exists():
                (target / file.name).parent.mkdir(parents=True, exist_ok=True)
                (target / file.name).symlink_to(file)
    return folder
