"""A tiny, randomly initialised PixArt-alpha pipeline written like a real diffusers repo (offline, seconds).

``PixArtAlphaPipeline`` = ``PixArtTransformer2DModel`` (``ada_norm_single``, cross-attention to T5 captions,
learned sigma: ``out_channels == 2 * in_channels``) + ``T5EncoderModel`` + ``T5Tokenizer`` + ``AutoencoderKL``
(8x) + ``DPMSolverMultistepScheduler`` with PixArt's training betas (linear 1e-4..0.02, 1000 steps). Only
the widths and depths shrink: 1 transformer block of width 32, a 1-layer T5 of width 32, a 4-stage VAE.

The tokenizer is a T5 Unigram vocabulary of the shapes captions' words built with ``tokenizers`` (what
``T5Tokenizer`` rebuilds from ``tokenizer.json`` on load, so it reloads unchanged).
"""

from __future__ import annotations

import copy
import random
from pathlib import Path
from typing import Any

import torch

from dit_lora.data.synthetic import build_directory_atomically

#: bump when the configs or the init change: a build whose marker carries another version is rebuilt
TINY_PIXART_VERSION = 1
_MARKER = "dit_lora_tiny.json"

TINY_PIXART: dict[str, Any] = {
    "resolution": 32,  # sample_size 4 x the VAE's 8x
    "transformer": {
        "num_attention_heads": 2,
        "attention_head_dim": 16,
        "in_channels": 4,
        "out_channels": 8,  # learned sigma, as PixArt-alpha: epsilon and variance halves
        "num_layers": 1,
        "cross_attention_dim": 32,
        "caption_channels": 32,  # == the T5's d_model
        "sample_size": 4,
        "patch_size": 2,
        "norm_type": "ada_norm_single",
        "norm_elementwise_affine": False,
        "norm_eps": 1e-6,
        "use_additional_conditions": False,  # the 1024 px PixArt's resolution/aspect embedding is off below 128
    },
    "vae": {
        "block_out_channels": [8, 8, 16, 16],
        "down_block_types": ["DownEncoderBlock2D"] * 4,
        "up_block_types": ["UpDecoderBlock2D"] * 4,
        "latent_channels": 4,
        "norm_num_groups": 4,
        "layers_per_block": 1,
        "sample_size": 32,
    },
    "text_encoder": {"d_model": 32, "d_kv": 16, "d_ff": 64, "num_layers": 1, "num_heads": 2,
                     "relative_attention_num_buckets": 8, "relative_attention_max_distance": 16,
                     "feed_forward_proj": "gated-gelu", "dense_act_fn": "gelu_new", "is_gated_act": True},
}

#: PixArt-alpha's scheduler (what PixArt-alpha/PixArt-XL-2-* ship): DPM-Solver over DDPM's linear betas
SCHEDULER_CONFIG = {"num_train_timesteps": 1000, "beta_start": 0.0001, "beta_end": 0.02, "beta_schedule": "linear",
                    "prediction_type": "epsilon", "solver_order": 2, "algorithm_type": "dpmsolver++"}

_WORDS = ("a an the of on in with and photo image background shape sks red green blue yellow orange purple white "
          "black circle square triangle star cat dog small large").split()


def tiny_pixart_config() -> dict[str, Any]:
    """A deep copy of the tiny configs (``resolution``, ``transformer``, ``vae``, ``text_encoder``)."""
    return copy.deepcopy(TINY_PIXART)


def build_tiny_t5_tokenizer():
    """A ``T5Tokenizer`` (Unigram, ids ``<pad>=0 </s>=1 <unk>=2``) over the shapes words and single characters."""
    from transformers import T5Tokenizer

    vocab = [("<pad>", 0.0), ("</s>", 0.0), ("<unk>", 0.0), ("\u2581", -2.0)]
    vocab += [(f"\u2581{w}", -3.0 - i / 100) for i, w in enumerate(_WORDS)]
    vocab += [(c, -8.0) for c in "abcdefghijklmnopqrstuvwxyz0123456789.,'-"]
    return T5Tokenizer(vocab=vocab, extra_ids=0, model_max_length=512)


def _scaling_factor(vae, resolution: int, seed: int) -> float:
    """1 / std of the posterior means of a few shapes images (what 0.18215 is for the SD VAE)."""
    from dit_lora.data.synthetic.shapes import render_shape_example

    rng = random.Random(seed)
    images = [render_shape_example(rng, resolution)[0] for _ in range(8)]
    pixels = torch.stack([torch.frombuffer(bytearray(im.tobytes()), dtype=torch.uint8).view(resolution, resolution, 3)
                          for im in images]).permute(0, 3, 1, 2).float() / 127.5 - 1.0
    with torch.no_grad():
        latents = vae.encode(pixels).latent_dist.mode()
    return float(f"{1.0 / latents.float().std().item():.4g}")


def build_tiny_pixart_components(seed: int = 0) -> dict[str, Any]:
    """The five ``PixArtAlphaPipeline`` components (fp32, eval mode), randomly initialised from ``seed``.

    The caller's global torch RNG state is restored afterwards.
    """
    from diffusers import AutoencoderKL, DPMSolverMultistepScheduler, PixArtTransformer2DModel
    from transformers import T5Config, T5EncoderModel

    config = tiny_pixart_config()
    tokenizer = build_tiny_t5_tokenizer()
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed * 1000 + 1)
        transformer = PixArtTransformer2DModel(**config["transformer"])
        torch.manual_seed(seed * 1000 + 2)
        vae = AutoencoderKL(**config["vae"]).eval()
        vae.register_to_config(scaling_factor=_scaling_factor(vae, config["resolution"], seed))
        torch.manual_seed(seed * 1000 + 3)
        t5 = T5Config(vocab_size=-(-len(tokenizer) // 8) * 8, pad_token_id=0, eos_token_id=1, decoder_start_token_id=0,
                      **config["text_encoder"])
        text_encoder = T5EncoderModel(t5).eval()
    return {"transformer": transformer.eval(), "text_encoder": text_encoder, "tokenizer": tokenizer, "vae": vae,
            "scheduler": DPMSolverMultistepScheduler(**SCHEDULER_CONFIG)}


def build_tiny_pixart_pipeline(path: str | Path, seed: int = 0) -> Path:
    """Write a random tiny ``PixArtAlphaPipeline`` to ``path`` (idempotent, atomic); return ``path``."""
    marker = {"kind": "pixart", "seed": seed, "version": TINY_PIXART_VERSION}

    def build(tmp: Path) -> None:
        from diffusers import PixArtAlphaPipeline

        PixArtAlphaPipeline(**build_tiny_pixart_components(seed)).save_pretrained(tmp, safe_serialization=True)

    return build_directory_atomically(path, _MARKER, marker, build)
