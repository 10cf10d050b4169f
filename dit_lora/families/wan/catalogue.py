"""Wan 2.1 / 2.2 checkpoints (``Wan-AI/*-Diffusers``): ``--family wan`` (text-to-video) and ``wan_i2v``.

Where each fact was checked (copies of published files and sources; nothing is fetched at run time):
- Hub ids: diffusers ``docs/source/en/api/pipelines/wan.md`` (its checkpoint list, ids with their casing) and the
  Wan-Video/Wan2.2 README ("integrated into Diffusers": T2V-A14B, I2V-A14B, TI2V-5B ``-Diffusers`` links).
- Which files each repo holds: a third-party copy of the Hub trees (a list of every file of
  ``Wan2.1-T2V-1.3B-Diffusers``, ``Wan2.1-I2V-14B-480P-Diffusers``, ``Wan2.2-T2V/I2V-A14B-Diffusers`` and
  ``Wan2.2-TI2V-5B-Diffusers``): ``tokenizer/`` holds ``special_tokens_map.json``, ``spiece.model``,
  ``tokenizer.json``, ``tokenizer_config.json``; only the 2.1 I2V repos have ``image_encoder/`` (config and one
  ``model.safetensors``) and ``image_processor/preprocessor_config.json``; the A14B repos have ``transformer_2/``.
- transformer/config.json: diffusers ``scripts/convert_wan_to_diffusers.py`` ``get_transformer_config`` (widths,
  heads, ``ffn_dim``, ``in_channels`` 16 / 36 / 48, I2V 2.1 ``image_dim`` 1280 and ``added_kv_proj_dim`` 5120; the
  2.2 I2V experts have neither), agreeing with Wan's own ``wan/configs/*.py`` (dim 1536/5120/3072, 12/40/24 heads,
  30/40/30 layers). The key set is what ``save_pretrained`` of the converting diffusers wrote (0.33.0.dev0 for 2.1,
  the ``_diffusers_version`` a copy of the I2V-720P ``model_index.json`` shows; 0.35.0.dev0 for 2.2, which added
  ``pos_embed_seq_len``); the files themselves were not read byte for byte.
- model_index.json: the conversion script's ``__main__`` (``boundary_ratio`` 0.875 T2V-A14B, 0.9 I2V-A14B,
  ``expand_timesteps`` True for TI2V-5B; 2.1 I2V with a CLIP ViT-H/14 image encoder), Wan's ``boundary`` (0.875 /
  0.900 in ``wan_t2v_A14B.py`` / ``wan_i2v_A14B.py``) and copies of the published files (2.1 I2V-720P: image
  encoder ``CLIPVisionModelWithProjection``, processor ``CLIPImageProcessor``, tokenizer ``T5TokenizerFast``; TI2V-5B:
  ``boundary_ratio`` null, ``transformer_2`` [null, null]; I2V-A14B: ``image_encoder`` [null, null]).
- vae/config.json: 2.1 VAE = ``AutoencoderKLWan``'s defaults (base_dim 96, z_dim 16, the 16 latents_mean/std, which
  are Wan's ``Wan2.1_VAE`` statistics); TI2V-5B = the script's ``vae22_diffusers_config`` (z_dim 48, base_dim 160,
  decoder_base_dim 256, is_residual, 12 in/out channels, patch 2, 16x spatial, ``clip_output`` False).
- scheduler/scheduler_config.json: ``UniPCMultistepScheduler`` with ``flow_prediction`` and ``use_flow_sigmas`` as
  the script builds it: ``flow_shift`` 5.0 for TI2V, 3.0 for every other checkpoint here (a copy of the T2V-A14B file
  agrees: 3.0). The 720P and A14B Hub files were not seen; Wan's own samplers use higher shifts (generate.py: 5.0 at
  720p, A14B ``sample_shift`` 12.0 T2V / 5.0 I2V), which is an inference setting, not the file.
- text_encoder/config.json: google/umt5-xxl (the script loads it), ``UMT5EncoderModel``, vocabulary 256384. Stored
  fp32 in the 2.1 repos (5 shards) and bf16 in the 2.2 repos (3 shards, 11.36 GB in a copy of the file sizes).
- image_encoder/config.json: the vision tower of laion/CLIP-ViT-H-14-laion2B-s32B-b79K (1280 wide, 32 layers, 16
  heads, patch 14, 224 px, projection 1024) saved as ``CLIPVisionModelWithProjection`` in bf16; its processor is
  :data:`IMAGE_PROCESSOR_CONFIG` (kept out of ``configs``: it is no model config; the real-layout tests write it).
- Trained sizes and rates: Wan2.1 ``wan/configs`` (``text_len`` 512, ``sample_fps`` 16, ``SUPPORTED_SIZES``:
  t2v-1.3B 480*832 only, 14B 720*1280 and 480*832) and ``generate.py`` (81 frames; ``--size`` default 1280*720);
  Wan2.2 ``wan/configs`` (``frame_num`` 81, ``sample_fps`` 16; TI2V-5B ``frame_num`` 121, ``sample_fps`` 24, sizes
  704*1280 / 1280*704 only, "720P ... 24fps" in the README).
- Stored dtype (transformer): fp32 in every repo here: the conversion's ``--dtype`` default, and the published shard
  sizes (T2V-A14B: 12 shards, 57.1 GB per expert for 14.29B parameters; 1.3B: 2 shards; TI2V-5B: 5; I2V-14B: 14).
- Recommended LoRA: DiffSynth-Studio ``examples/wanvideo/model_training/lora/<model>.sh`` for each of these models
  (``--lora_rank 32``, ``--learning_rate 1e-4``; ``lora_alpha`` defaults to the rank in
  ``diffsynth/diffusion/training_module.py``; one sample per step: ``runner.py``'s DataLoader collates ``x[0]``).
  kohya-ss/musubi-tuner ``docs/wan.md`` trains rank 32 at 2e-4 (network_alpha 1) as its example.
- Training timestep shift (a family option, ``--flow_shift``, so not in ``defaults``): :data:`TRAINING_SHIFT`.

Not confirmed: the Hub files byte for byte (key order, ``_diffusers_version`` of each repo, the 720P and A14B
scheduler files, the UMT5 ``tokenizer_config.json`` beyond the keys kept below), whether the 480P and 720P I2V
repos differ in any config (taken as identical: same architecture, told apart by Hub id only).

The entries themselves are data: ``catalogue.json`` beside this module (:mod:`dit_lora.catalogue.files`).
"""

from __future__ import annotations

from typing import Any

from dit_lora.catalogue.files import read_catalogue

_FILE = read_catalogue(__name__)
ENTRIES = _FILE.entries
TEXT_LEN = 512
T2V, I2V = "wan", "wan_i2v"
#: image_processor/preprocessor_config.json of the 2.1 I2V repos (CLIP's 224 px crop and normalisation)
IMAGE_PROCESSOR_CONFIG: dict[str, Any] = _FILE.parts["image_processor_config"]

#: the training timestep shift each checkpoint is recommended (``--flow_shift``, a family option): DiffSynth-Studio
#: trains every Wan model with its "Wan" FlowMatchScheduler, whose shift defaults to 5
#: (``diffsynth/diffusion/flow_match.py`` ``set_timesteps_wan``; its A14B scripts' ``--max/min_timestep_boundary``
#: 0.417 is the 0.875 boundary under that shift). Others: the Wan team trains 480p at shift 2 and raises it for
#: 720p (Wan-Video/Wan2.1 issue 291); musubi-tuner's example uses 3.0 (docs/wan.md).
TRAINING_SHIFT = 5.0
TRAINING_SHIFT_SOURCE: str = _FILE.parts["training_shift_source"]


def default_size(expand_timesteps: bool) -> tuple[int, int, int, str]:
    """``(frames, height, width, why)`` a Wan run trains at without size flags (``WanInfo.trained_size``), listed in
    each entry's defaults so that ``dit-lora models`` shows it: TI2V-5B its one size; every other checkpoint 81 x
    480 x 832, its 480p size, also for the 14B and A14B ones trained up to 720 x 1280 (a quarter of the tokens per
    clip of 720p; the 480P and 720P I2V releases share every config, so a local copy cannot tell which it is)."""
    if expand_timesteps:
        return 121, 704, 1280, "Wan2.2 TI2V-5B generates 121 frames at 704x1280 (24 fps)"
    return 81, 480, 832, "Wan 2.1/2.2 generate 81 frames; 480x832 is the 480p size every Wan checkpoint runs at"
