"""FLUX.1 [dev]'s and Chroma1-HD's checkpoint folders laid out as the Hub has them, built offline from the catalogue's
configs (``dit_lora/families/flux/catalogue.json``, ``families/chroma/catalogue.json``), in the manner of
``flux2_layout.py``: every published config; the transformer at its real widths and heads (3072 wide, 24 heads,
``joint_attention_dim`` 4096; FLUX.1's pooled 768 and guidance embedding, Chroma's modulation network) cut to one
double and one single block, in bf16; the VAE with its published 16 latent channels, scale and shift but 32-channel
stages and one layer each (fp32); CLIP-L (768 wide, FLUX.1's) and T5-XXL (4096 wide) at one layer each, their
vocabularies the local tokenizers' (bf16); the tokenizers trained locally on the demo words."""

from __future__ import annotations

from pathlib import Path

import torch
from real_layout import _built_in, write_configs

from dit_lora.catalogue import by_hub_id

DEV = "black-forest-labs/FLUX.1-dev"
CHROMA_HD = "lodestones/Chroma1-HD"


def dev_pipeline(root: Path, depth: tuple[int, int] = (1, 1)) -> Path:
    """FLUX.1 [dev]'s repo as the Hub lays it out (see the module docstring); ``depth``: double and single blocks."""
    from diffusers import FluxTransformer2DModel
    from transformers import CLIPTextConfig, CLIPTextModel

    from dit_lora.families.flux.demo import build_clip_tokenizer

    folder = _layout(DEV, root / "FLUX.1-dev", FluxTransformer2DModel, depth)
    _text_encoder(folder, DEV, "text_encoder", "tokenizer", build_clip_tokenizer(), CLIPTextModel, CLIPTextConfig)
    _t5(folder, DEV, "text_encoder_2", "tokenizer_2")
    return folder


def chroma_pipeline(root: Path, depth: tuple[int, int] = (1, 1)) -> Path:
    """Chroma1-HD's repo as the Hub lays it out (see the module docstring); ``depth``: double and single blocks."""
    from diffusers import ChromaTransformer2DModel

    folder = _layout(CHROMA_HD, root / "Chroma1-HD", ChromaTransformer2DModel, depth)
    _t5(folder, CHROMA_HD, "text_encoder", "tokenizer")
    return folder


def _layout(hub_id: str, folder: Path, transformer_class, depth: tuple[int, int]) -> Path:
    """``hub_id``'s configs in ``folder``, its transformer at ``depth`` (double, single) blocks, its narrow VAE."""
    from diffusers import AutoencoderKL

    entry = by_hub_id(hub_id)
    folder = write_configs(hub_id, folder)
    config = {**entry.configs["transformer/config.json"], "num_layers": depth[0], "num_single_layers": depth[1]}
    _built_in(torch.bfloat16, 0, lambda: transformer_class.from_config(config)).save_pretrained(folder / "transformer")
    narrow = {"block_out_channels": [32, 32, 32, 32], "layers_per_block": 1, "norm_num_groups": 32}
    AutoencoderKL.from_config({**entry.configs["vae/config.json"], **narrow}).save_pretrained(folder / "vae")
    return folder


def _t5(folder: Path, hub_id: str, sub: str, tokenizer_sub: str) -> None:
    """T5-XXL's encoder at one layer and the local T5 tokenizer, in ``sub`` and ``tokenizer_sub``."""
    from transformers import T5Config, T5EncoderModel

    from dit_lora.data.synthetic.tokenizers import build_tiny_t5_tokenizer

    _text_encoder(folder, hub_id, sub, tokenizer_sub, build_tiny_t5_tokenizer(), T5EncoderModel, T5Config)


def _text_encoder(folder: Path, hub_id: str, sub: str, tokenizer_sub: str, tokenizer, model, config_class) -> None:
    """``hub_id``'s ``sub`` text encoder at one layer, its vocabulary ``tokenizer``'s, saved with it (bf16)."""
    tokenizer.save_pretrained(folder / tokenizer_sub)
    values = {k: v for k, v in by_hub_id(hub_id).configs[f"{sub}/config.json"].items()
              if k not in ("architectures", "model_type")}
    depth = "num_hidden_layers" if model.__name__ == "CLIPTextModel" else "num_layers"
    ids = {"eos_token_id": tokenizer.eos_token_id, "pad_token_id": tokenizer.pad_token_id}
    if model.__name__ == "CLIPTextModel":
        ids["bos_token_id"] = tokenizer.bos_token_id
    values.update({depth: 1, "vocab_size": -(-len(tokenizer) // 64) * 64, **ids})
    _built_in(torch.bfloat16, 1, lambda: model(config_class(**values))).save_pretrained(folder / sub)


def train_from_single_file(model: Path, tmp_path: Path) -> tuple[str, dict, Path]:
    """``python -m dit_lora train`` without --family on ``model`` (a folder of this module) with its transformer as
    one file in the original layout behind ComfyUI's prefix, one step at 64 px (the size, caption length and
    precision the only extra flags: the CPU cannot train 1024 px at 3072 wide in a test); returns the run's printed
    text (one line), its summary and its output folder."""
    from flux_single_file import write_bfl_flux_file
    from helpers import ROOT, read_summary
    from warm import run_script

    from dit_lora.data.synthetic.shapes import make_shapes_dataset
    from dit_lora.modelfiles.single_file import COMFY_PREFIX

    file = write_bfl_flux_file(model / "transformer", tmp_path / "transformer.safetensors", COMFY_PREFIX)
    data = make_shapes_dataset(tmp_path / "data", n=2, size=64, seed=0)
    out = tmp_path / "out"
    args = ["train", "--pretrained_model_name_or_path", model, "--transformer_file", file, "--train_data_dir", data,
            "--output_dir", out, "--max_train_steps", "1", "--report_to", "none", "--mixed_precision", "no",
            "--resolution", "64", "--max_sequence_length", "16", "--skip_doctor", "true"]
    proc = run_script(ROOT / "dit_lora" / "__main__.py", args, timeout=600, warm=True)
    assert proc.returncode == 0, (proc.stdout + proc.stderr)[-6000:]
    text = " ".join(proc.stdout.split())
    assert "except num_layers 1 (published: 19), num_single_layers 1 (published: 38)" in text
    assert "memory plan: predicted peak" in text
    return text, read_summary(out), out


def live_lora_modules(pipe, out: Path) -> dict:
    """The pipeline's transformer's LoRA modules live after loading ``out`` with ``load_lora_weights``: every one of
    the file's (two tensors each), at scale 1 (alpha folded into lora_B)."""
    from safetensors.torch import load_file

    pipe.load_lora_weights(out)
    saved = load_file(str(out / "pytorch_lora_weights.safetensors"))
    live = {n: m for n, m in pipe.transformer.named_modules() if hasattr(m, "lora_A") and m.active_adapters}
    assert 2 * len(live) == len(saved) and all(m.scaling[m.active_adapters[0]] == 1.0 for m in live.values())
    return live
