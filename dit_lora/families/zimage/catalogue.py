"""Z-Image checkpoints (``ZImagePipeline``, ``Tongyi-MAI/*``).

Where each fact was checked (no network at run time; these are copies of published files):
- Hub ids: diffusers' docs (``docs/source/en/api/pipelines/z_image.md``, ``README_z_image.md`` of the dreambooth
  example) and musubi-tuner's ``docs/zimage.md`` (Turbo, then the base model "released January 2026").
- transformer/config.json: diffusers' ``ZImageTransformer2DModel`` defaults, which the Hub file repeats except
  ``axes_lens`` [1536, 512, 512]; the same 15 values appear in several trainers' copies of the Hub file (ai-toolkit's
  ``ZIMAGE_DEFAULT_CONFIG``, musubi-tuner's ``zimage_config.py``). Turbo and base share it.
- scheduler/scheduler_config.json: FlowMatchEulerDiscreteScheduler, 1000 steps, no dynamic shifting; shift 3.0 for
  Turbo (musubi-tuner ``DEFAULT_SCHEDULER_SHIFT``, ai-toolkit's ``scheduler_config``), 6.0 for the base model
  (a secondary source: an installer that rebuilds the base repo's scheduler file; not read on the Hub itself).
- vae/config.json: the FLUX.1 AutoencoderKL (16 latent channels, scaling 0.3611, shift 0.1159: musubi-tuner
  ``ZIMAGE_VAE_*`` and the copies above).
- text_encoder/config.json: Qwen3-4B (hidden 2560, 36 layers, 32 heads, 8 key/value heads, head_dim 128);
  model_index.json names ``Qwen3Model`` and ``Qwen2Tokenizer``. Tokenizer files: Qwen3's set.
- Recommended LoRA: diffusers ``train_dreambooth_lora_z_image.py`` defaults (rank 4, alpha 4, lr 1e-4,
  ``--max_sequence_length`` 512, ``--weighting_scheme none`` = uniform timesteps); validation as the releases
  sample: Turbo 8 steps without guidance (ZImagePipeline's docstring), base 50 steps at guidance 5 (the pipeline's
  defaults, and README_z_image.md's validation guidance); batch 1 x accumulation 4 from README_z_image.md.

The entries themselves are data: ``catalogue.json`` beside this module (:mod:`dit_lora.catalogue.files`).
"""

from __future__ import annotations

from dit_lora.catalogue.files import read_catalogue

ENTRIES = read_catalogue(__name__).entries
