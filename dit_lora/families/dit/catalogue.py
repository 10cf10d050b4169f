"""Class-conditional DiT checkpoints (``facebook/DiT-XL-2-256``, ``-512``; ``DiTPipeline``).

Where each fact was checked:
- Hub ids: the diffusers ``DiTPipeline`` docstring and ``tests/pipelines/dit/test_dit.py``; their Hub tree pages.
- transformer/config.json: what diffusers' ``scripts/convert_dit_to_diffusers.py`` writes (the Hub file, 602
  bytes, still names the legacy ``Transformer2DModel``, which diffusers remaps to ``DiTTransformer2DModel`` for
  ``norm_type`` ``ada_norm_zero``): 28 layers, 16 heads x 72, in 4 / out 8 channels (learned sigma), patch 2,
  1000 classes, ``sample_size`` = px / 8.
- vae/config.json: ``stabilityai/sd-vae-ft-ema`` (the conversion script's default and DiT's ``train.py``),
  scaling_factor 0.18215.
- scheduler: the conversion script's ``DDIMScheduler`` (1000 steps, linear betas 1e-4..0.02, epsilon).
- model_index.json carries ``id2label``: ImageNet's human-readable synonym lists (``"tench, Tinca tinca"``),
  which ``DiTPipeline.get_label_ids`` splits on commas. Class i is the i-th ImageNet wnid in sorted order
  (DiT trains with ``ImageFolder``); that list ships as ``imagenet_wnids.txt`` (from timm 1.0.31
  ``timm/data/_info/imagenet_synsets.txt``).
- Weights: ``main`` of both repos holds pickle ``.bin`` files only (fp32); a safetensors conversion exists
  only as the open pull request ``refs/pr/1`` of DiT-XL-2-256. dit-lora loads safetensors only.
- Recommended settings: no published LoRA recipe exists for DiT. The paper (facebookresearch/DiT ``train.py``)
  trains with AdamW at a constant 1e-4 and no weight decay; that learning rate is the default here, rank and
  alpha stay the recipe's own (16).
"""

from __future__ import annotations

from dit_lora.catalogue.entry import Checkpoint

_VAE = {
    "_class_name": "AutoencoderKL",
    "act_fn": "silu",
    "block_out_channels": [128, 256, 512, 512],
    "down_block_types": ["DownEncoderBlock2D"] * 4,
    "up_block_types": ["UpDecoderBlock2D"] * 4,
    "in_channels": 3,
    "out_channels": 3,
    "latent_channels": 4,
    "layers_per_block": 2,
    "norm_num_groups": 32,
    "sample_size": 256,
    "scaling_factor": 0.18215,
}
_SCHEDULER = {
    "_class_name": "DDIMScheduler",
    "num_train_timesteps": 1000,
    "beta_schedule": "linear",
    "beta_start": 0.0001,
    "beta_end": 0.02,
    "prediction_type": "epsilon",
    "clip_sample": False,
    "set_alpha_to_one": True,
    "steps_offset": 0,
    "timestep_spacing": "leading",
}


def _entry(px: int) -> Checkpoint:
    transformer = {
        "_class_name": "Transformer2DModel",
        "activation_fn": "gelu-approximate",
        "attention_bias": True,
        "attention_head_dim": 72,
        "in_channels": 4,
        "out_channels": 8,
        "norm_elementwise_affine": False,
        "norm_type": "ada_norm_zero",
        "num_attention_heads": 16,
        "num_embeds_ada_norm": 1000,
        "num_layers": 28,
        "patch_size": 2,
        "sample_size": px // 8,
        "norm_eps": 1e-05,
        "norm_num_groups": 32,
        "dropout": 0.0,
    }
    identity = {
        k: transformer[k]
        for k in (
            "norm_type",
            "num_attention_heads",
            "attention_head_dim",
            "patch_size",
            "in_channels",
            "out_channels",
            "sample_size",
        )
    }
    return Checkpoint(
        hub_id=f"facebook/DiT-XL-2-{px}",
        family="dit",
        title=f"DiT-XL/2 {px} px (ImageNet, 1000 classes)",
        signature={"transformer/config.json": identity},
        depth={"transformer/config.json": {"num_layers": 28}},
        configs={
            "model_index.json": {
                "_class_name": "DiTPipeline",
                "scheduler": ["diffusers", "DDIMScheduler"],
                "transformer": ["diffusers", "Transformer2DModel"],
                "vae": ["diffusers", "AutoencoderKL"],
            },
            "transformer/config.json": transformer,
            "vae/config.json": _VAE,
            "scheduler/scheduler_config.json": _SCHEDULER,
        },
        stored_dtype="fp32",
        text_length=1,
        defaults={"learning_rate": 1e-4, "resolution": px},
        sources={
            "defaults": "facebookresearch/DiT train.py: AdamW, constant lr 1e-4 (no LoRA recipe is published)",
            "resolution": "trained resolution: transformer sample_size x the VAE's 8x",
            "configs": "diffusers scripts/convert_dit_to_diffusers.py (module docstring)",
        },
        trained={"resolution": px},
        notes="main holds pickle .bin weights only; dit-lora needs safetensors (e.g. --revision refs/pr/1 for 256)",
    )


ENTRIES = [_entry(256), _entry(512)]
