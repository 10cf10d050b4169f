"""SANA-Video test support: a run config built in code and the 2B 480p release's folder as the Hub lays it out,
rebuilt offline from the catalogue's configs.

The folder has the published ``model_index.json`` and DPM-Solver scheduler, the transformer config at real widths,
heads, patch and ``sample_size`` (one block instead of 20), the Wan 2.1 VAE's published z_dim, stages, temporal and
spatial compression and latent statistics (8 base channels, one residual block per stage), Gemma-2-2B's model width
in one narrow layer (layout_weights.NARROW_GEMMA2) with a locally trained tokenizer's vocabulary (bf16), and Gemma's
tokenizer file set; random weights.
"""

from __future__ import annotations

import json
from pathlib import Path

import torch
from layout_weights import NARROW_GEMMA2, quick_init, random_weights
from real_layout import gemma_tokenizer_folder, write_configs

from dit_lora.catalogue import by_hub_id
from dit_lora.config import TrainConfig

HUB_ID = "Efficient-Large-Model/SANA-Video_2B_480p_diffusers"


def sanavideo_cfg(family: str = "sanavideo", **values) -> TrainConfig:
    """A SANA-Video config (nothing is read from it unless a test names a real folder)."""
    values = {"pretrained_model_name_or_path": "unused/sanavideo", "train_data_dir": "unused", **values}
    return TrainConfig.for_family(family, **values)


def sanavideo_pipeline(root: Path, layers: int = 1, seed: int = 0) -> Path:
    """The 2B 480p release's folder under ``root`` (see the module docstring)."""
    from diffusers import AutoencoderKLWan, SanaVideoTransformer3DModel
    from transformers import AutoConfig, AutoModel, AutoTokenizer

    entry = by_hub_id(HUB_ID)
    folder = write_configs(HUB_ID, root / HUB_ID.split("/")[-1])
    with torch.random.fork_rng(devices=[]), quick_init(seed):  # layout_weights.quick_init: copies, not draws
        torch.manual_seed(seed)
        transformer = SanaVideoTransformer3DModel.from_config(
            {**entry.configs["transformer/config.json"], "num_layers": layers}
        )
        random_weights(transformer, seed).save_pretrained(folder / "transformer")
        del transformer
        narrow = {"base_dim": 8, "num_res_blocks": 1}
        AutoencoderKLWan.from_config({**entry.configs["vae/config.json"], **narrow}).save_pretrained(folder / "vae")
        vocab = len(AutoTokenizer.from_pretrained(gemma_tokenizer_folder(folder / "tokenizer")))
        te = {k: v for k, v in entry.configs["text_encoder/config.json"].items() if k != "architectures"}
        te.update(num_hidden_layers=1, vocab_size=vocab, **NARROW_GEMMA2)
        AutoModel.from_config(AutoConfig.for_model(**te)).to(torch.bfloat16).save_pretrained(folder / "text_encoder")
    # save_pretrained rewrites config.json: keep the published files (the catalogue's signature reads them)
    for name, keep in (("transformer", {"num_layers": layers}), ("vae", narrow)):
        published = entry.configs[f"{name}/config.json"]
        (folder / name / "config.json").write_text(json.dumps({**published, **keep}, indent=1))
    return folder
