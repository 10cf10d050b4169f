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
"""

from __future__ import annotations

from dit_lora.catalogue.entry import Checkpoint

_T5_XXL = {
    "architectures": ["T5EncoderModel"],
    "model_type": "t5",
    "d_model": 4096,
    "d_ff": 10240,
    "d_kv": 64,
    "num_heads": 64,
    "num_layers": 24,
    "vocab_size": 32128,
    "feed_forward_proj": "gated-gelu",
    "dense_act_fn": "gelu_new",
    "is_gated_act": True,
    "layer_norm_epsilon": 1e-06,
    "relative_attention_num_buckets": 32,
    "relative_attention_max_distance": 128,
    "tie_word_embeddings": False,
    "pad_token_id": 0,
    "eos_token_id": 1,
    "decoder_start_token_id": 0,
}
_TOKENIZER_FILES = ("added_tokens.json", "special_tokens_map.json", "spiece.model", "tokenizer_config.json")


def _transformer(*, heads: int, layers: int, v15: bool, i2v: bool) -> dict:
    cfg = {
        "_class_name": "CogVideoXTransformer3DModel",
        "_diffusers_version": "0.31.0",
        "activation_fn": "gelu-approximate",
        "attention_bias": True,
        "attention_head_dim": 64,
        "dropout": 0.0,
        "flip_sin_to_cos": True,
        "freq_shift": 0,
        "in_channels": 32 if i2v else 16,
        "max_text_seq_length": 226,
        "norm_elementwise_affine": True,
        "norm_eps": 1e-05,
        "num_attention_heads": heads,
        "num_layers": layers,
        "out_channels": 16,
        "patch_size": 2,
        "spatial_interpolation_scale": 1.875,
        "temporal_compression_ratio": 4,
        "temporal_interpolation_scale": 1.0,
        "text_embed_dim": 4096,
        "time_embed_dim": 512,
        "timestep_activation_fn": "silu",
        "use_rotary_positional_embeddings": heads != 30,
        "use_learned_positional_embeddings": i2v and not v15,
    }
    if v15:
        cfg.update(
            patch_bias=False,
            patch_size_t=2,
            sample_frames=81,
            sample_height=300,
            sample_width=300,
            ofs_embed_dim=512 if i2v else None,
        )
    else:
        cfg.update(sample_frames=49, sample_height=60, sample_width=90)
    return cfg


def _vae(scaling: float, *, v15: bool) -> dict:
    return {
        "_class_name": "AutoencoderKLCogVideoX",
        "_diffusers_version": "0.32.0.dev0",
        "act_fn": "silu",
        "block_out_channels": [128, 256, 256, 512],
        "down_block_types": ["CogVideoXDownBlock3D"] * 4,
        "force_upcast": True,
        "in_channels": 3,
        "latent_channels": 16,
        "latents_mean": None,
        "latents_std": None,
        "layers_per_block": 3,
        "norm_eps": 1e-06,
        "norm_num_groups": 32,
        "out_channels": 3,
        "sample_height": 480,
        "sample_width": 720,
        "scaling_factor": scaling,
        "shift_factor": None,
        "temporal_compression_ratio": 4,
        "up_block_types": ["CogVideoXUpBlock3D"] * 4,
        "use_post_quant_conv": False,
        "use_quant_conv": False,
        "invert_scale_latents": v15,
    }


def _scheduler(snr_shift_scale: float) -> dict:
    return {
        "_class_name": "CogVideoXDDIMScheduler",
        "_diffusers_version": "0.30.0.dev0",
        "beta_end": 0.012,
        "beta_schedule": "scaled_linear",
        "beta_start": 0.00085,
        "clip_sample": False,
        "clip_sample_range": 1.0,
        "num_train_timesteps": 1000,
        "prediction_type": "v_prediction",
        "rescale_betas_zero_snr": True,
        "sample_max_value": 1.0,
        "set_alpha_to_one": True,
        "snr_shift_scale": snr_shift_scale,
        "steps_offset": 0,
        "timestep_spacing": "trailing",
        "trained_betas": None,
    }


def _entry(
    hub_id: str, title: str, *, heads: int, v15: bool, i2v: bool, dtype: str, scaling: float, shift: float
) -> Checkpoint:
    transformer = _transformer(heads=heads, layers=30 if heads == 30 else 42, v15=v15, i2v=i2v)
    # Heads tell 2B from 5B, in_channels T2V from I2V, patch_size_t 1.0 from 1.5; keys that older revisions of
    # the Hub files leave out (use_rotary_positional_embeddings in the first 2b upload) stay out of the match.
    identity = {
        k: transformer.get(k)
        for k in ("num_attention_heads", "attention_head_dim", "in_channels", "text_embed_dim", "patch_size_t")
    }
    pipeline = "CogVideoXImageToVideoPipeline" if i2v else "CogVideoXPipeline"
    frames, height, width, fps = (81, 768, 1360, 16) if v15 else (49, 480, 720, 8)
    return Checkpoint(
        hub_id=hub_id,
        family="cogvideox_i2v" if i2v else "cogvideox",
        title=title,
        signature={"transformer/config.json": identity},
        depth={"transformer/config.json": {"num_layers": transformer["num_layers"]}},
        configs={
            "model_index.json": {
                "_class_name": pipeline,
                "_diffusers_version": "0.31.0",
                "scheduler": ["diffusers", "CogVideoXDDIMScheduler"],
                "text_encoder": ["transformers", "T5EncoderModel"],
                "tokenizer": ["transformers", "T5Tokenizer"],
                "transformer": ["diffusers", "CogVideoXTransformer3DModel"],
                "vae": ["diffusers", "AutoencoderKLCogVideoX"],
            },
            "transformer/config.json": transformer,
            "vae/config.json": _vae(scaling, v15=v15),
            "scheduler/scheduler_config.json": _scheduler(shift),
            "text_encoder/config.json": _T5_XXL,
            "tokenizer/tokenizer_config.json": {
                "tokenizer_class": "T5Tokenizer",
                "model_max_length": 226,
                "extra_ids": 100,
                "pad_token": "<pad>",
                "eos_token": "</s>",
                "unk_token": "<unk>",
            },
        },
        stored_dtype=dtype,
        text_length=226,
        defaults={"rank": 128, "lora_alpha": 64, "learning_rate": 2e-5, "train_batch_size": 1},
        sources={
            "defaults": "THUDM/CogVideo finetune/schemas/args.py (rank 128, alpha 64, lr 2e-5) and its "
            "README table (batch 1)",
            "configs": "Hub files and diffusers scripts/convert_cogvideox_to_diffusers.py (module docstring)",
        },
        trained={"frames": frames, "height": height, "width": width, "fps": fps},
        tokenizer_files=_TOKENIZER_FILES,
        notes=("the config's sample size 300x300 is the RoPE grid (2400 px), not a training size" if v15 else ""),
    )


ENTRIES = [
    _entry(
        "THUDM/CogVideoX-2b",
        "CogVideoX 2B",
        heads=30,
        v15=False,
        i2v=False,
        dtype="fp16",
        scaling=1.15258426,
        shift=3.0,
    ),
    _entry("THUDM/CogVideoX-5b", "CogVideoX 5B", heads=48, v15=False, i2v=False, dtype="bf16", scaling=0.7, shift=1.0),
    _entry(
        "THUDM/CogVideoX-5b-I2V",
        "CogVideoX 5B image-to-video",
        heads=48,
        v15=False,
        i2v=True,
        dtype="bf16",
        scaling=0.7,
        shift=1.0,
    ),
    _entry(
        "THUDM/CogVideoX1.5-5B", "CogVideoX 1.5 5B", heads=48, v15=True, i2v=False, dtype="bf16", scaling=0.7, shift=1.0
    ),
    _entry(
        "THUDM/CogVideoX1.5-5B-I2V",
        "CogVideoX 1.5 5B image-to-video",
        heads=48,
        v15=True,
        i2v=True,
        dtype="bf16",
        scaling=0.7,
        shift=1.0,
    ),
]
