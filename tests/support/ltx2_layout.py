"""An LTX-2 checkpoint as the Hub lays it out (``Lightricks/LTX-2``, ``diffusers/LTX-2.3-Diffusers``), for the tests
and the GPU step benchmark: every published config, the transformer at its real widths and heads (``layers`` deep,
the published 48 by default), random weights, safetensors.

What is cut, and why it does not change a training step: the video VAE keeps its latent channels (128), its 32x
spatial and 8x temporal compression and its patch, but 8-to-64 channels with one residual block a stage (it only
builds the cache); the vocoder is 64 wide (it only writes validation sound); Gemma-3-12B keeps its model width
(3840, what the connectors read) but one narrow layer and the local tokenizer's vocabulary, so the connectors read
two hidden states (``text_proj_in_factor`` 2 instead of 49) and still give the transformer 3840-wide captions.
The audio VAE is the published one (its width is the packed latents' size).
"""

from __future__ import annotations

import json
from pathlib import Path

import torch
from layout_weights import _built_in

#: the video VAE's published config made narrow: same compression, channels and patch
NARROW_VAE = {
    "block_out_channels": [8, 16, 32, 64],
    "decoder_block_out_channels": [8, 16, 32],
    "layers_per_block": [1, 1, 1, 1, 1],
    "decoder_layers_per_block": [1, 1, 1, 1],
}
#: Gemma-3's text layer: the model width (3840) and heads stay, the inside narrows (as NARROW_GEMMA2 does)
NARROW_GEMMA3 = {"num_hidden_layers": 1, "head_dim": 32, "query_pre_attn_scalar": 32, "intermediate_size": 64}


def _write_configs(folder: Path, configs: dict) -> None:
    for file, config in configs.items():  # model_index.json, scheduler and the rest as published
        (folder / file).parent.mkdir(parents=True, exist_ok=True)
        (folder / file).write_text(json.dumps(config, indent=1))


def _text_encoder(folder: Path, published: dict) -> None:
    """The tokenizer (the demo's Gemma BPE) and a one-layer Gemma-3 of the published width, in bf16."""
    from dit_lora.families.ltx2 import demo

    tokenizer = demo._tokenizer()
    tokenizer.save_pretrained(folder / "tokenizer")
    tiny = demo.DEMO.read().value("text_encoder")
    values = {
        "text_config": {**published["text_config"], **NARROW_GEMMA3},
        "vision_config": tiny["vision_config"],
        "mm_tokens_per_image": tiny["mm_tokens_per_image"],
    }
    part = demo._gemma3(values)
    _built_in(torch.bfloat16, 6, lambda: part.make(tokenizer)).save_pretrained(folder / "text_encoder")


def ltx2_pipeline(
    root: Path,
    hub_id: str = "Lightricks/LTX-2",
    layers: int | None = None,
    dtype: torch.dtype = torch.bfloat16,
    connector_layers: int | None = None,
) -> Path:
    """The Hub-layout folder of ``hub_id`` under ``root``: the transformer ``layers`` deep (default: published) in
    ``dtype``, the text connectors ``connector_layers`` blocks a modality (default: published; they run once per
    caption, while the cache is built, never in a step), the other parts as the module docstring says."""
    from diffusers import AutoencoderKLLTX2Audio, AutoencoderKLLTX2Video, LTX2VideoTransformer3DModel
    from diffusers.pipelines.ltx2 import LTX2TextConnectors
    from diffusers.pipelines.ltx2.vocoder import LTX2Vocoder

    from dit_lora.catalogue import by_hub_id

    configs = by_hub_id(hub_id).configs
    folder = root / hub_id.split("/")[-1]
    _write_configs(folder, configs)
    transformer = {**configs["transformer/config.json"]}
    transformer["num_layers"] = layers or transformer["num_layers"]
    _built_in(dtype, 0, lambda: LTX2VideoTransformer3DModel.from_config(transformer)).save_pretrained(
        folder / "transformer", max_shard_size="5GB"
    )
    vae = {**configs["vae/config.json"], **NARROW_VAE}
    _built_in(torch.float32, 2, lambda: AutoencoderKLLTX2Video.from_config(vae)).save_pretrained(folder / "vae")
    audio = configs["audio_vae/config.json"]
    _built_in(torch.float32, 3, lambda: AutoencoderKLLTX2Audio.from_config(audio)).save_pretrained(
        folder / "audio_vae"
    )
    connectors = {**configs["connectors/config.json"], "text_proj_in_factor": NARROW_GEMMA3["num_hidden_layers"] + 1}
    if connector_layers is not None:
        connectors.update(video_connector_num_layers=connector_layers, audio_connector_num_layers=connector_layers)
    _built_in(dtype, 4, lambda: LTX2TextConnectors.from_config(connectors)).save_pretrained(folder / "connectors")
    vocoder = {**configs["vocoder/config.json"], "hidden_channels": 64}
    _built_in(torch.float32, 5, lambda: LTX2Vocoder.from_config(vocoder)).save_pretrained(folder / "vocoder")
    _text_encoder(folder, configs["text_encoder/config.json"])
    for sub in ("connectors", "vocoder", "text_encoder"):  # the published config, with what this folder changed
        assert (folder / sub / "config.json").is_file(), sub
    return folder
