"""Qwen-Image checkpoints (``QwenImagePipeline``, ``QwenImageEditPipeline``, ``QwenImageEditPlusPipeline``).

Where each fact was checked (no network at run time; these are copies of published files):
- transformer/config.json: ``QwenImageTransformer2DModel`` of ``Qwen/Qwen-Image`` (60 layers, 24 heads x 128,
  joint_attention_dim 3584, in_channels 64, out_channels 16, patch 2, axes_dims_rope [16, 56, 56]): diffusers'
  class defaults agree, and public configs quoting the Hub file (searched). The Edit models share it; Edit-2511 adds
  ``zero_cond_t: true`` (the reference images' tokens modulated at t = 0), as public copies of its config show.
- vae/config.json: ``AutoencoderKLQwenImage``'s defaults (base_dim 96, z_dim 16, dim_mult [1, 2, 4, 4], the 16
  ``latents_mean``/``latents_std`` values), the Qwen-Image VAE all five releases ship.
- scheduler/scheduler_config.json: dynamic shifting, base/max image seq len 256/8192, base/max shift 0.5/0.9,
  shift_terminal 0.02, exponential (public copies of Qwen/Qwen-Image's file; musubi-tuner's ``qwen_shift`` takes the
  same line).
- text_encoder/config.json: Qwen2.5-VL-7B-Instruct (hidden 3584, 28 layers, 28 heads, 4 kv heads, vocab 152064).
- Edit prompt handling: diffusers ``pipeline_qwenimage_edit.py`` (control image resized to a 1024 x 1024 area, drop
  index 64) and ``pipeline_qwenimage_edit_plus.py`` (each image at a 384 x 384 area for the text encoder and
  1024 x 1024 for the VAE, "Picture N:" prefixes).
- Defaults: diffusers ``examples/dreambooth/README_qwen.md`` (lr 2e-4, batch 1 x accumulation 4),
  ``train_dreambooth_lora_qwen_image.py`` (``--max_sequence_length 512``); resolution: Qwen-Image's model card
  (1328 x 1328 for 1:1), 1024 for the Edit models (the pipelines' own 1024 x 1024 area); rank 16 as musubi-tuner's
  guide (``--network_dim 16``).

Not confirmed (kept out of signatures): ``pooled_projection_dim`` (an unused key of the Hub file), byte-exact copies of
the 2512 and Edit repos' configs beyond the values named above.

The entries themselves are data: ``catalogue.json`` beside this module (:mod:`dit_lora.catalogue.files`).
"""

from __future__ import annotations

from dit_lora.catalogue.files import read_catalogue

_FILE = read_catalogue(__name__)
ENTRIES = _FILE.entries
#: the registry name that trains each pipeline class
FAMILY_OF: dict[str, str] = _FILE.parts["family_of"]
