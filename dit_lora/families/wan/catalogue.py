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
"""

from __future__ import annotations

from dit_lora.catalogue.entry import Checkpoint

_V21, _V22 = "0.33.0.dev0", "0.35.0.dev0"
TEXT_LEN = 512
T2V, I2V = "wan", "wan_i2v"
_TOKENIZER_FILES = ("special_tokens_map.json", "spiece.model", "tokenizer.json", "tokenizer_config.json")

_UMT5_XXL = {
    "architectures": ["UMT5EncoderModel"],
    "model_type": "umt5",
    "classifier_dropout": 0.0,
    "d_ff": 10240,
    "d_kv": 64,
    "d_model": 4096,
    "decoder_start_token_id": 0,
    "dense_act_fn": "gelu_new",
    "dropout_rate": 0.1,
    "eos_token_id": 1,
    "feed_forward_proj": "gated-gelu",
    "initializer_factor": 1.0,
    "is_encoder_decoder": True,
    "is_gated_act": True,
    "layer_norm_epsilon": 1e-06,
    "num_decoder_layers": 24,
    "num_heads": 64,
    "num_layers": 24,
    "output_past": True,
    "pad_token_id": 0,
    "relative_attention_max_distance": 128,
    "relative_attention_num_buckets": 32,
    "scalable_attention": True,
    "tie_word_embeddings": False,
    "tokenizer_class": "T5Tokenizer",
    "use_cache": True,
    "vocab_size": 256384,
}
#: the keys of umt5-xxl's tokenizer_config.json the loaders read (its 300 <extra_id_*> tokens are in the model file)
_TOKENIZER_CONFIG = {
    "tokenizer_class": "T5Tokenizer",
    "extra_ids": 300,
    "pad_token": "<pad>",
    "eos_token": "</s>",
    "unk_token": "<unk>",
}
_CLIP_VIT_H = {
    "architectures": ["CLIPVisionModelWithProjection"],
    "model_type": "clip_vision_model",
    "attention_dropout": 0.0,
    "dropout": 0.0,
    "hidden_act": "gelu",
    "hidden_size": 1280,
    "image_size": 224,
    "initializer_factor": 1.0,
    "initializer_range": 0.02,
    "intermediate_size": 5120,
    "layer_norm_eps": 1e-05,
    "num_attention_heads": 16,
    "num_channels": 3,
    "num_hidden_layers": 32,
    "patch_size": 14,
    "projection_dim": 1024,
    "torch_dtype": "bfloat16",
}
#: image_processor/preprocessor_config.json of the 2.1 I2V repos (CLIP's 224 px crop and normalisation)
IMAGE_PROCESSOR_CONFIG = {
    "crop_size": {"height": 224, "width": 224},
    "do_center_crop": True,
    "do_convert_rgb": True,
    "do_normalize": True,
    "do_rescale": True,
    "do_resize": True,
    "image_mean": [0.48145466, 0.4578275, 0.40821073],
    "image_processor_type": "CLIPImageProcessor",
    "image_std": [0.26862954, 0.26130258, 0.27577711],
    "resample": 3,
    "rescale_factor": 0.00392156862745098,
    "size": {"shortest_edge": 224},
}
_LATENTS_MEAN_16 = [
    -0.7571,
    -0.7089,
    -0.9113,
    0.1075,
    -0.1745,
    0.9653,
    -0.1517,
    1.5508,
    0.4134,
    -0.0715,
    0.5517,
    -0.3632,
    -0.1922,
    -0.9497,
    0.2503,
    -0.2921,
]
_LATENTS_STD_16 = [
    2.8184,
    1.4541,
    2.3275,
    2.6558,
    1.2196,
    1.7708,
    2.6052,
    2.0743,
    3.2687,
    2.1526,
    2.8652,
    1.5579,
    1.6382,
    1.1253,
    2.8251,
    1.916,
]
_LATENTS_MEAN_48 = [
    -0.2289,
    -0.0052,
    -0.1323,
    -0.2339,
    -0.2799,
    0.0174,
    0.1838,
    0.1557,
    -0.1382,
    0.0542,
    0.2813,
    0.0891,
    0.1570,
    -0.0098,
    0.0375,
    -0.1825,
    -0.2246,
    -0.1207,
    -0.0698,
    0.5109,
    0.2665,
    -0.2108,
    -0.2158,
    0.2502,
    -0.2055,
    -0.0322,
    0.1109,
    0.1567,
    -0.0729,
    0.0899,
    -0.2799,
    -0.1230,
    -0.0313,
    -0.1649,
    0.0117,
    0.0723,
    -0.2839,
    -0.2083,
    -0.0520,
    0.3748,
    0.0152,
    0.1957,
    0.1433,
    -0.2944,
    0.3573,
    -0.0548,
    -0.1681,
    -0.0667,
]
_LATENTS_STD_48 = [
    0.4765,
    1.0364,
    0.4514,
    1.1677,
    0.5313,
    0.4990,
    0.4818,
    0.5013,
    0.8158,
    1.0344,
    0.5894,
    1.0901,
    0.6885,
    0.6165,
    0.8454,
    0.4978,
    0.5759,
    0.3523,
    0.7135,
    0.6804,
    0.5833,
    1.4146,
    0.8986,
    0.5659,
    0.7069,
    0.5338,
    0.4889,
    0.4917,
    0.4069,
    0.4999,
    0.6866,
    0.4093,
    0.5709,
    0.6065,
    0.6415,
    0.4944,
    0.5726,
    1.2042,
    0.5458,
    1.6887,
    0.3971,
    1.0600,
    0.3943,
    0.5537,
    0.5444,
    0.4089,
    0.7468,
    0.7744,
]

#: transformer sizes per model (conversion script ``get_transformer_config``; Wan's ``wan/configs``)
_SIZES = {
    "1.3B": {"num_attention_heads": 12, "ffn_dim": 8960, "num_layers": 30, "in_channels": 16, "out_channels": 16},
    "14B": {"num_attention_heads": 40, "ffn_dim": 13824, "num_layers": 40, "in_channels": 16, "out_channels": 16},
    "14B-I2V": {"num_attention_heads": 40, "ffn_dim": 13824, "num_layers": 40, "in_channels": 36, "out_channels": 16},
    "5B": {"num_attention_heads": 24, "ffn_dim": 14336, "num_layers": 30, "in_channels": 48, "out_channels": 48},
}

#: the training timestep shift each checkpoint is recommended (``--flow_shift``, a family option): DiffSynth-Studio
#: trains every Wan model with its "Wan" FlowMatchScheduler, whose shift defaults to 5
#: (``diffsynth/diffusion/flow_match.py`` ``set_timesteps_wan``; its A14B scripts' ``--max/min_timestep_boundary``
#: 0.417 is the 0.875 boundary under that shift). Others: the Wan team trains 480p at shift 2 and raises it for
#: 720p (Wan-Video/Wan2.1 issue 291); musubi-tuner's example uses 3.0 (docs/wan.md).
TRAINING_SHIFT = 5.0
TRAINING_SHIFT_SOURCE = (
    "DiffSynth-Studio diffsynth/diffusion/flow_match.py (FlowMatchScheduler 'Wan', shift 5) used "
    "by examples/wanvideo/model_training/lora/*.sh"
)


def _transformer(size: str, *, version: str, image: bool) -> dict:
    cfg = {
        "_class_name": "WanTransformer3DModel",
        "_diffusers_version": version,
        "added_kv_proj_dim": 5120 if image else None,
        "attention_head_dim": 128,
        "cross_attn_norm": True,
        "eps": 1e-06,
        "freq_dim": 256,
        "image_dim": 1280 if image else None,
        "patch_size": [1, 2, 2],
        "qk_norm": "rms_norm_across_heads",
        "rope_max_seq_len": 1024,
        "text_dim": 4096,
        **_SIZES[size],
    }
    if version == _V22:
        cfg["pos_embed_seq_len"] = None  # added to WanTransformer3DModel with FLF2V, after the 2.1 conversions
    return dict(sorted(cfg.items()))


def _vae(version: str, *, z48: bool = False) -> dict:
    cfg = {
        "_class_name": "AutoencoderKLWan",
        "_diffusers_version": version,
        "attn_scales": [],
        "base_dim": 96,
        "dim_mult": [1, 2, 4, 4],
        "dropout": 0.0,
        "latents_mean": _LATENTS_MEAN_16,
        "latents_std": _LATENTS_STD_16,
        "num_res_blocks": 2,
        "temperal_downsample": [False, True, True],
        "z_dim": 16,
    }
    if version == _V22:  # the 2.2 diffusers VAE writes its later arguments too (clip_output: True by default then)
        cfg.update(
            decoder_base_dim=None,
            is_residual=False,
            in_channels=3,
            out_channels=3,
            patch_size=None,
            scale_factor_temporal=4,
            scale_factor_spatial=8,
            clip_output=True,
        )
    if z48:
        cfg.update(
            base_dim=160,
            decoder_base_dim=256,
            z_dim=48,
            is_residual=True,
            in_channels=12,
            out_channels=12,
            patch_size=2,
            scale_factor_spatial=16,
            latents_mean=_LATENTS_MEAN_48,
            latents_std=_LATENTS_STD_48,
            clip_output=False,
        )
    return dict(sorted(cfg.items()))


def _scheduler(version: str, shift: float) -> dict:
    cfg = {
        "_class_name": "UniPCMultistepScheduler",
        "_diffusers_version": version,
        "beta_end": 0.02,
        "beta_schedule": "linear",
        "beta_start": 0.0001,
        "disable_corrector": [],
        "dynamic_thresholding_ratio": 0.995,
        "final_sigmas_type": "zero",
        "flow_shift": shift,
        "lower_order_final": True,
        "num_train_timesteps": 1000,
        "predict_x0": True,
        "prediction_type": "flow_prediction",
        "rescale_betas_zero_snr": False,
        "sample_max_value": 1.0,
        "solver_order": 2,
        "solver_p": None,
        "solver_type": "bh2",
        "steps_offset": 0,
        "thresholding": False,
        "timestep_spacing": "linspace",
        "trained_betas": None,
        "use_beta_sigmas": False,
        "use_exponential_sigmas": False,
        "use_flow_sigmas": True,
        "use_karras_sigmas": False,
    }
    if version == _V22:
        cfg.update(time_shift_type="exponential", use_dynamic_shifting=False)
    return dict(sorted(cfg.items()))


def _model_index(pipeline: str, version: str, *, clip: bool = False, **pipeline_config) -> dict:
    index = {
        "_class_name": pipeline,
        "_diffusers_version": version,
        "scheduler": ["diffusers", "UniPCMultistepScheduler"],
        "text_encoder": ["transformers", "UMT5EncoderModel"],
        "tokenizer": ["transformers", "T5TokenizerFast"],
        "transformer": ["diffusers", "WanTransformer3DModel"],
        "vae": ["diffusers", "AutoencoderKLWan"],
    }
    if clip:
        index.update(
            image_encoder=["transformers", "CLIPVisionModelWithProjection"],
            image_processor=["transformers", "CLIPImageProcessor"],
        )
    index.update(pipeline_config)
    return dict(sorted(index.items()))


_IDENTITY = (
    "num_attention_heads",
    "attention_head_dim",
    "ffn_dim",
    "in_channels",
    "out_channels",
    "image_dim",
    "added_kv_proj_dim",
    "text_dim",
)
_SOURCES = {
    "defaults": "DiffSynth-Studio examples/wanvideo/model_training/lora/<model>.sh (--lora_rank 32, --learning_rate "
    "1e-4; lora_alpha = rank in diffsynth/diffusion/training_module.py; one sample per step)",
    "configs": "diffusers scripts/convert_wan_to_diffusers.py and Wan-Video wan/configs (module docstring)",
    "training_shift": TRAINING_SHIFT_SOURCE,
    **dict.fromkeys(
        ("max_num_frames", "height", "width"),
        "dit-lora's default training size (default_size: 480p, or TI2V-5B's one size), what WanInfo.trained_size runs",
    ),
}


def _entry(
    hub_id: str,
    title: str,
    size: str,
    *,
    version: str,
    shift: float,
    trained: tuple[int, int, int, int],
    image: bool = False,
    clip: bool = False,
    experts: int = 1,
    notes: str = "",
    **pipeline_config,
) -> Checkpoint:
    """One checkpoint: ``image`` = the 2.1 I2V CLIP image branch in the transformer; ``clip`` = its image encoder in
    the repo; ``experts`` 2 = A14B (``transformer`` high noise, ``transformer_2`` low noise); ``pipeline_config``:
    ``model_index.json``'s ``boundary_ratio`` / ``expand_timesteps`` (2.2 only: the 2.1 files predate them)."""
    i2v = _SIZES[size]["in_channels"] == 36
    pipeline = "WanImageToVideoPipeline" if i2v else "WanPipeline"
    if version == _V22:
        pipeline_config.setdefault("boundary_ratio", None)
        pipeline_config.setdefault("expand_timesteps", False)
        two = ["diffusers", "WanTransformer3DModel"] if experts == 2 else [None, None]
        pipeline_config["transformer_2"] = two
        if i2v:
            pipeline_config.update(image_encoder=[None, None], image_processor=[None, None])
    transformer = _transformer(size, version=version, image=image)
    configs = {
        "model_index.json": _model_index(pipeline, version, clip=clip, **pipeline_config),
        "transformer/config.json": transformer,
        "vae/config.json": _vae(version, z48=size == "5B"),
        "scheduler/scheduler_config.json": _scheduler(version, shift),
        "text_encoder/config.json": {**_UMT5_XXL, "torch_dtype": "float32" if version == _V21 else "bfloat16"},
        "tokenizer/tokenizer_config.json": _TOKENIZER_CONFIG,
    }
    depth = {"transformer/config.json": {"num_layers": transformer["num_layers"]}}
    if experts == 2:
        configs["transformer_2/config.json"] = transformer  # the two experts share the architecture
        depth["transformer_2/config.json"] = {"num_layers": transformer["num_layers"]}
    if clip:
        configs["image_encoder/config.json"] = _CLIP_VIT_H
    # Heads, widths and channels tell the sizes and tasks apart; the pipeline class and boundary_ratio tell the 2.2
    # A14B experts from the 2.1 14B transformer of the same shape (a 2.1 folder has no boundary_ratio: None).
    signature = {
        "transformer/config.json": {k: transformer[k] for k in _IDENTITY},
        "model_index.json": {"_class_name": pipeline, "boundary_ratio": pipeline_config.get("boundary_ratio")},
    }
    frames, height, width, fps = trained
    size_defaults = dict(
        zip(("max_num_frames", "height", "width"), default_size(bool(pipeline_config.get("expand_timesteps"))))
    )
    # TI2V-5B is one checkpoint for both tasks (expand_timesteps): --family wan_i2v gets its defaults too.
    also = (I2V,) if pipeline_config.get("expand_timesteps") else ()
    return Checkpoint(
        hub_id=hub_id,
        family=I2V if i2v else T2V,
        also_families=also,
        title=title,
        signature=signature,
        configs=configs,
        stored_dtype="fp32",
        text_length=TEXT_LEN,
        defaults={"rank": 32, "lora_alpha": 32, "learning_rate": 1e-4, "train_batch_size": 1, **size_defaults},
        sources=dict(_SOURCES),
        trained={"frames": frames, "height": height, "width": width, "fps": fps},
        tokenizer_files=_TOKENIZER_FILES,
        depth=depth,
        notes=notes or _notes(size, experts, pipeline_config),
    )


def default_size(expand_timesteps: bool) -> tuple[int, int, int, str]:
    """``(frames, height, width, why)`` a Wan run trains at without size flags (``WanInfo.trained_size``), listed in
    each entry's defaults so that ``dit-lora models`` shows it: TI2V-5B its one size; every other checkpoint 81 x
    480 x 832, its 480p size, also for the 14B and A14B ones trained up to 720 x 1280 (a quarter of the tokens per
    clip of 720p; the 480P and 720P I2V releases share every config, so a local copy cannot tell which it is)."""
    if expand_timesteps:
        return 121, 704, 1280, "Wan2.2 TI2V-5B generates 121 frames at 704x1280 (24 fps)"
    return 81, 480, 832, "Wan 2.1/2.2 generate 81 frames; 480x832 is the 480p size every Wan checkpoint runs at"


def _notes(size: str, experts: int, pipeline_config: dict) -> str:
    if experts == 2:
        return (
            f"two experts: transformer (high noise, t >= {pipeline_config['boundary_ratio']} x 1000) and "
            "transformer_2 (low noise); 480 x 832 is supported too"
        )
    if pipeline_config.get("expand_timesteps"):
        return (
            "text-to-video and image-to-video in one model (expand_timesteps: the first latent frame's tokens get "
            "timestep 0); one entry for --family wan (text-to-video) and wan_i2v (image-to-video)"
        )
    return "480 x 832 is supported too" if size == "14B" else ""


# The 480P and 720P I2V releases share every config (the test of twins requires "same architecture" here).
_TWINS = (
    "same architecture as the other Wan 2.1 I2V 14B release (480P / 720P); a local copy is matched to the 480P "
    "entry unless named by its Hub id"
)

ENTRIES = [
    _entry(
        "Wan-AI/Wan2.1-T2V-1.3B-Diffusers",
        "Wan 2.1 T2V 1.3B",
        "1.3B",
        version=_V21,
        shift=3.0,
        trained=(81, 480, 832, 16),
    ),
    _entry(
        "Wan-AI/Wan2.1-T2V-14B-Diffusers",
        "Wan 2.1 T2V 14B",
        "14B",
        version=_V21,
        shift=3.0,
        trained=(81, 720, 1280, 16),
    ),
    _entry(
        "Wan-AI/Wan2.1-I2V-14B-480P-Diffusers",
        "Wan 2.1 I2V 14B 480P",
        "14B-I2V",
        version=_V21,
        shift=3.0,
        trained=(81, 480, 832, 16),
        image=True,
        clip=True,
        notes=_TWINS,
    ),
    _entry(
        "Wan-AI/Wan2.1-I2V-14B-720P-Diffusers",
        "Wan 2.1 I2V 14B 720P",
        "14B-I2V",
        version=_V21,
        shift=3.0,
        trained=(81, 720, 1280, 16),
        image=True,
        clip=True,
        notes=_TWINS,
    ),
    _entry(
        "Wan-AI/Wan2.2-TI2V-5B-Diffusers",
        "Wan 2.2 TI2V 5B",
        "5B",
        version=_V22,
        shift=5.0,
        trained=(121, 704, 1280, 24),
        expand_timesteps=True,
    ),
    _entry(
        "Wan-AI/Wan2.2-T2V-A14B-Diffusers",
        "Wan 2.2 T2V A14B",
        "14B",
        version=_V22,
        shift=3.0,
        trained=(81, 720, 1280, 16),
        experts=2,
        boundary_ratio=0.875,
    ),
    _entry(
        "Wan-AI/Wan2.2-I2V-A14B-Diffusers",
        "Wan 2.2 I2V A14B",
        "14B-I2V",
        version=_V22,
        shift=3.0,
        trained=(81, 720, 1280, 16),
        experts=2,
        boundary_ratio=0.9,
    ),
]
