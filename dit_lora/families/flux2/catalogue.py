"""FLUX.2 checkpoints (``Flux2Pipeline`` for FLUX.2 [dev], ``Flux2KleinPipeline`` for the klein models).

Where each fact was checked (no network at run time; these are copies of published facts):
- Hub ids: diffusers' ``examples/dreambooth/README_flux2.md`` (FLUX.2-dev, FLUX.2-klein-4B, -9B), the
  ``Flux2KleinPipeline`` docstring (FLUX.2-klein-base-9B), musubi-tuner ``docs/flux_2.md`` (all four klein
  repos: 4B, base 4B, 9B, base 9B) and SimpleTuner's ``HUGGINGFACE_PATHS`` (dev, klein-base-4B, klein-base-9B).
- transformer/config.json: what diffusers' ``scripts/convert_flux2_to_diffusers.py`` writes per model type
  (``flux2-dev``, ``klein-4b``, ``klein-9b``: widths, depths, ``joint_attention_dim``, ``guidance_embeds`` false for
  klein); the base and distilled klein models share their architecture (musubi-tuner loads both with one config).
- vae/config.json: ``AutoencoderKLFlux2()``'s defaults, which the conversion script builds the VAE from.
- scheduler/scheduler_config.json: FLUX.1-dev's, which the conversion script copies (and ai-toolkit and
  SimpleTuner write out: dynamic shifting, 0.5 at 256 tokens to 1.15 at 4096, shift 3.0).
- model_index.json: the pipeline the conversion script saves; ``is_distilled`` true except in the base repos
  (``if_distilled = "base" not in dit_filename``), which ``Flux2KleinPipeline`` reads to skip CFG.
- text_encoder/config.json: Mistral-Small-3.2-24B-Instruct-2506 (the script's text encoder: 40 layers of 5120,
  Pixtral vision tower) for dev; Qwen3-4B (36 x 2560) and Qwen3-8B (36 x 4096) for klein 4B / 9B (musubi-tuner's
  docs and the klein pipeline's ``Qwen3ForCausalLM``; ``joint_attention_dim`` = 3 x hidden agrees).
- Recommended LoRA: diffusers' README_flux2 commands (``--resolution 1024``, batch 1 x gradient accumulation 4,
  ``--learning_rate 1e-4``, ``--guidance_scale 1``) and the script's ``--rank 4 --lora_alpha 4``; sampling:
  dev 50 steps at guidance 4 (``Flux2Pipeline``'s defaults), klein base 50 steps at CFG 4, distilled klein
  4 steps at 1 (musubi-tuner's table, the klein model cards).
- Stored dtype: bf16 (the conversion script's default ``--dit_dtype``).

Not confirmed (kept out of signatures): the exact Hub bytes of each config, the tokenizer file list of each repo.

The entries themselves are data: ``catalogue.json`` beside this module (:mod:`dit_lora.catalogue.files`).
"""

from __future__ import annotations

from dit_lora.catalogue.files import read_catalogue

ENTRIES = read_catalogue(__name__).entries
