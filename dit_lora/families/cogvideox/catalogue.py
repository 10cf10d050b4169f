"""CogVideoX checkpoints (``THUDM/CogVideoX*``; the organisation is now shown as ``zai-org``).

Where each fact was checked (copies of published files; nothing is fetched at run time):
- Hub ids: THUDM/CogVideo ``README.md`` model table (ids with their casing: ``-2b``, ``-5b``, ``-5b-I2V``,
  ``CogVideoX1.5-5B``, ``-5B-I2V``) and the diffusers docs ``api/pipelines/cogvideox.md``; the zai-org
  collection lists the same five repos.
- transformer/config.json: the 2b Hub file (blame of rev ad5ce86), read in full; 5b, 5b-I2V, 1.5 and 1.5-I2V
  from copies that name those repos as their source, matching diffusers' ``scripts/convert_cogvideox_to_diffusers.py``
  (1.0: patch_size_t None, sample 60x90, 49 frames; 1.5: patch_size_t 2, sample 300x300, 81 frames, I2V
  ``ofs_embed_dim`` 512; 5b-I2V: learned positions). The 1.5 sample size 300 is the RoPE grid's extent
  (a-r-r-o-w in huggingface/finetrainers#121), not a training size.
- vae/config.json: the 2b Hub file (scaling_factor 1.15258426) and the 5b "Upload VAE in fp32" diff (0.7);
  1.5 sets ``invert_scale_latents`` (conversion script ``--version 1.5``).
- scheduler/scheduler_config.json: the 2b Hub file after "Update scheduler/scheduler_config.json (#2)"
  (snr_shift_scale 3.0, trailing); 5b and 1.5 snr_shift_scale 1.0 per the conversion script and THUDM's SAT
  configs (the 5b/1.5 files themselves were not seen).
- Tokenizer: the 5b and 1.5 Hub trees hold exactly ``added_tokens.json``, ``special_tokens_map.json``,
  ``spiece.model``, ``tokenizer_config.json`` (no ``tokenizer.json``: loading needs sentencepiece and protobuf);
  prompt length 226 (conversion script ``TOKENIZER_MAX_LENGTH``, pipelines' ``max_sequence_length``).
- Trained size: THUDM/CogVideo README table (1.0: 720x480, 49 frames, 8 fps; 1.5: 1360x768, 81 frames, 16 fps).
- Recommended LoRA: THUDM ``finetune/schemas/args.py`` (rank 128, lora_alpha 64, learning_rate 2e-5) and
  its README table (batch 1 per GPU for every model).
- Stored dtype: the README "Inference Precision" row and the conversion script ("fp16 (2B) or bf16 (5B)").

The entries themselves are data: ``catalogue.json`` beside this module (:mod:`dit_lora.catalogue.files`).
"""

from __future__ import annotations

from dit_lora.catalogue.files import read_catalogue

ENTRIES = read_catalogue(__name__).entries
