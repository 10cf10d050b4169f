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

The entries themselves are data: ``catalogue.json`` beside this module (:mod:`dit_lora.catalogue.files`).
"""

from __future__ import annotations

from dit_lora.catalogue.files import read_catalogue

ENTRIES = read_catalogue(__name__).entries
