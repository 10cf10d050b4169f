"""Qwen-Image checkpoint folders laid out as the Hub has them, built offline from the catalogue's configs.

The published ``model_index.json``, scheduler, transformer and VAE configs; the transformer at its real widths (24 heads
x 128 = 3072, joint_attention_dim 3584, in_channels 64, axes_dims_rope [16, 56, 56]) cut to one block; the VAE as
published (base_dim 96, 16 latent channels); Qwen2.5-VL-7B at its model widths (hidden 3584, 28 heads, 4 kv heads;
vision tower 1280 wide) cut to one language and one vision layer. What is cut besides the depth: the language layer's
MLP (64 wide instead of 18944), and the vocabulary (a byte-level BPE trained here, ``demo.build_tiny_qwen_tokenizer``,
so the embedding has a few hundred rows instead of 152064, and the special tokens' ids in the text encoder's config are
that tokenizer's). Random weights (layout_weights.quick_init), bf16 as the Hub stores them, safetensors; the tokenizer
folder in the Hub's file set (vocab.json, merges.txt, tokenizer_config.json, special_tokens_map.json,
added_tokens.json; no tokenizer.json), and for the Edit models the ``processor/`` folder.
"""

from __future__ import annotations

import json
from pathlib import Path

import torch
from layout_weights import _built_in

from dit_lora.catalogue import by_hub_id


def _write_json(path: Path, data: dict) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(data, indent=2) + "\n")


def _tokenizer_folder(folder: Path):
    """The tiny tokenizer saved, then reduced to the Hub's file set (vocab.json and merges.txt, no tokenizer.json)."""
    from dit_lora.families.qwenimage.demo import build_tiny_qwen_tokenizer

    tokenizer = build_tiny_qwen_tokenizer()
    tokenizer.save_pretrained(folder)
    data = json.loads((folder / "tokenizer.json").read_text())
    model = data["model"]
    _write_json(folder / "vocab.json", model["vocab"])
    merges = [m if isinstance(m, str) else " ".join(m) for m in model["merges"]]
    (folder / "merges.txt").write_text("#version: 0.2\n" + "".join(f"{m}\n" for m in merges), encoding="utf-8")
    added = {t["content"]: t["id"] for t in data["added_tokens"]}
    _write_json(folder / "added_tokens.json", added)
    _write_json(folder / "special_tokens_map.json", {"eos_token": "<|endoftext|>", "pad_token": "<|endoftext|>"})
    (folder / "tokenizer.json").unlink()
    return tokenizer


def _text_encoder_config(entry, tokenizer) -> dict:
    config = json.loads(json.dumps(entry.configs["text_encoder/config.json"]))
    ids = {t: tokenizer.convert_tokens_to_ids(t) for t in ("<|endoftext|>", "<|im_end|>", "<|vision_start|>",
                                                           "<|vision_end|>", "<|vision_pad|>", "<|image_pad|>",
                                                           "<|video_pad|>")}
    # a 64-wide MLP instead of 18944: dit-lora never reads it, and the published one was 204M of the layer's 233M
    # parameters, written once and loaded by both runs
    config.update(num_hidden_layers=1, max_window_layers=1, intermediate_size=64,
                  vocab_size=-(-len(tokenizer) // 64) * 64,
                  bos_token_id=ids["<|endoftext|>"], eos_token_id=ids["<|im_end|>"],
                  vision_start_token_id=ids["<|vision_start|>"], vision_end_token_id=ids["<|vision_end|>"],
                  vision_token_id=ids["<|vision_pad|>"], image_token_id=ids["<|image_pad|>"],
                  video_token_id=ids["<|video_pad|>"])
    config["vision_config"].update(depth=1, fullatt_block_indexes=[0])
    return config


def _bf16(build):
    """``build()`` with bf16 as the default dtype (a 7B-wide layer costs its bf16 bytes only once), its init's draws
    layout_weights.quick_init's."""
    return _built_in(torch.bfloat16, 0, build)


def qwenimage_pipeline(root: Path, hub_id: str = "Qwen/Qwen-Image", layers: int = 1) -> Path:
    """The Hub layout of ``hub_id`` (a catalogued Qwen-Image or Qwen-Image-Edit release) under ``root``."""
    from diffusers import AutoencoderKLQwenImage, QwenImageTransformer2DModel
    from transformers import Qwen2_5_VLConfig, Qwen2_5_VLForConditionalGeneration

    entry = by_hub_id(hub_id)
    folder = root / hub_id.split("/")[-1]
    for file, config in entry.configs.items():
        if file != "text_encoder/config.json":
            _write_json(folder / file, config)
    transformer = _bf16(lambda: QwenImageTransformer2DModel.from_config(
        {**entry.configs["transformer/config.json"], "num_layers": layers}))
    transformer.save_pretrained(folder / "transformer")
    _write_json(folder / "transformer/config.json", {**entry.configs["transformer/config.json"], "num_layers": layers})
    _bf16(lambda: AutoencoderKLQwenImage.from_config(entry.configs["vae/config.json"])).save_pretrained(folder / "vae")
    tokenizer = _tokenizer_folder(folder / "tokenizer")
    config = _text_encoder_config(entry, tokenizer)
    text_encoder = _bf16(lambda: Qwen2_5_VLForConditionalGeneration(Qwen2_5_VLConfig.from_dict(config)))
    text_encoder.save_pretrained(folder / "text_encoder", max_shard_size="400MB")
    _write_json(folder / "text_encoder/config.json", config)
    if "processor" in entry.configs["model_index.json"]:
        _processor_folder(folder / "processor", tokenizer)
    return folder


def _processor_folder(folder: Path, tokenizer) -> None:
    """The Edit repos' processor/: the published image processor settings (min_pixels 3136, max_pixels 12845056,
    patch 14, temporal patch 2, merge 2) and the tokenizer (built without torchvision: the family's processor.py)."""
    from transformers import Qwen2VLImageProcessor

    from dit_lora.families.qwenimage.processor import image_only_processor, save_processor

    image = Qwen2VLImageProcessor(min_pixels=3136, max_pixels=12845056, patch_size=14, temporal_patch_size=2,
                                  merge_size=2)
    save_processor(image_only_processor(image, tokenizer), folder)


def edit_layout_from(t2i: Path, root: Path, hub_id: str = "Qwen/Qwen-Image-Edit-2509") -> Path:
    """The Hub layout of an Edit release sharing ``t2i``'s weights (linked: the Edit repos' transformer, VAE and
    Qwen2.5-VL have the text-to-image widths; 2511's transformer config adds ``zero_cond_t``), with the Edit
    release's configs and ``processor/``."""
    entry = by_hub_id(hub_id)
    folder = root / hub_id.split("/")[-1]
    for part in ("transformer", "vae", "text_encoder", "tokenizer", "scheduler"):
        (folder / part).mkdir(parents=True, exist_ok=True)
        for file in (t2i / part).iterdir():
            (folder / part / file.name).symlink_to(file)
    layers = json.loads((t2i / "transformer/config.json").read_text())["num_layers"]
    (folder / "transformer/config.json").unlink()
    _write_json(folder / "transformer/config.json", {**entry.configs["transformer/config.json"], "num_layers": layers})
    _write_json(folder / "model_index.json", entry.configs["model_index.json"])
    from transformers import AutoTokenizer

    _processor_folder(folder / "processor", AutoTokenizer.from_pretrained(t2i / "tokenizer"))
    return folder
