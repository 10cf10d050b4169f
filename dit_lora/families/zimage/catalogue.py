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
"""

from __future__ import annotations

from dit_lora.catalogue.entry import Checkpoint

_MODEL_INDEX = {
    "_class_name": "ZImagePipeline",
    "_diffusers_version": "0.36.0.dev0",
    "scheduler": ["diffusers", "FlowMatchEulerDiscreteScheduler"],
    "text_encoder": ["transformers", "Qwen3Model"],
    "tokenizer": ["transformers", "Qwen2Tokenizer"],
    "transformer": ["diffusers", "ZImageTransformer2DModel"],
    "vae": ["diffusers", "AutoencoderKL"],
}
_TRANSFORMER = {
    "_class_name": "ZImageTransformer2DModel",
    "_diffusers_version": "0.36.0.dev0",
    "all_f_patch_size": [1],
    "all_patch_size": [2],
    "axes_dims": [32, 48, 48],
    "axes_lens": [1536, 512, 512],
    "cap_feat_dim": 2560,
    "dim": 3840,
    "in_channels": 16,
    "n_heads": 30,
    "n_kv_heads": 30,
    "n_layers": 30,
    "n_refiner_layers": 2,
    "norm_eps": 1e-05,
    "qk_norm": True,
    "rope_theta": 256.0,
    "t_scale": 1000.0,
}
_VAE = {
    "_class_name": "AutoencoderKL",
    "_diffusers_version": "0.36.0.dev0",
    "act_fn": "silu",
    "block_out_channels": [128, 256, 512, 512],
    "down_block_types": ["DownEncoderBlock2D"] * 4,
    "force_upcast": True,
    "in_channels": 3,
    "latent_channels": 16,
    "latents_mean": None,
    "latents_std": None,
    "layers_per_block": 2,
    "mid_block_add_attention": True,
    "norm_num_groups": 32,
    "out_channels": 3,
    "sample_size": 1024,
    "scaling_factor": 0.3611,
    "shift_factor": 0.1159,
    "up_block_types": ["UpDecoderBlock2D"] * 4,
    "use_post_quant_conv": False,
    "use_quant_conv": False,
}
_QWEN3_4B = {
    "architectures": ["Qwen3ForCausalLM"],
    "attention_bias": False,
    "attention_dropout": 0.0,
    "bos_token_id": 151643,
    "eos_token_id": 151645,
    "head_dim": 128,
    "hidden_act": "silu",
    "hidden_size": 2560,
    "initializer_range": 0.02,
    "intermediate_size": 9728,
    "max_position_embeddings": 40960,
    "max_window_layers": 36,
    "model_type": "qwen3",
    "num_attention_heads": 32,
    "num_hidden_layers": 36,
    "num_key_value_heads": 8,
    "rms_norm_eps": 1e-06,
    "rope_scaling": None,
    "rope_theta": 1000000,
    "sliding_window": None,
    "tie_word_embeddings": True,
    "torch_dtype": "bfloat16",
    "use_cache": True,
    "use_sliding_window": False,
    "vocab_size": 151936,
}
_TOKENIZER_FILES = ("merges.txt", "tokenizer.json", "tokenizer_config.json", "vocab.json")
_SOURCES = {
    "defaults": "diffusers train_dreambooth_lora_z_image.py defaults (rank 4, alpha 4, lr 1e-4)",
    "train_batch_size": "diffusers README_z_image.md (batch 1 x gradient accumulation 4 at 1024 px)",
    "gradient_accumulation_steps": "diffusers README_z_image.md (batch 1 x gradient accumulation 4 at 1024 px)",
    "resolution": "trained resolution (the FLUX.1 VAE's sample_size; the releases sample at 1024 px)",
    "validation_inference_steps": "the release's sampling (see validation_guidance_scale)",
    "validation_guidance_scale": "Turbo: 8 steps, guidance 0 (distilled, no CFG); base: 50 steps, guidance 5 (ZImagePipeline's defaults)",
    "configs": "diffusers ZImageTransformer2DModel defaults and trainers' copies of the Hub files (module docstring)",
}


def _scheduler(shift: float) -> dict:
    return {
        "_class_name": "FlowMatchEulerDiscreteScheduler",
        "_diffusers_version": "0.36.0.dev0",
        "num_train_timesteps": 1000,
        "shift": shift,
        "use_dynamic_shifting": False,
    }


def _entry(hub_id: str, title: str, shift: float, steps: int, guidance: float, notes: str) -> Checkpoint:
    identity = {k: _TRANSFORMER[k] for k in ("dim", "n_heads", "cap_feat_dim", "in_channels", "axes_dims")}
    return Checkpoint(
        hub_id=hub_id,
        family="zimage",
        title=title,
        # Turbo and base share every transformer value: the scheduler's shift tells them apart
        signature={"transformer/config.json": identity, "scheduler/scheduler_config.json": {"shift": shift}},
        depth={"transformer/config.json": {k: _TRANSFORMER[k] for k in ("n_layers", "n_refiner_layers")}},
        configs={
            "model_index.json": _MODEL_INDEX,
            "transformer/config.json": _TRANSFORMER,
            "vae/config.json": _VAE,
            "scheduler/scheduler_config.json": _scheduler(shift),
            "text_encoder/config.json": _QWEN3_4B,
        },
        stored_dtype="bf16",
        text_length=512,
        defaults={
            "rank": 4,
            "lora_alpha": 4,
            "learning_rate": 1e-4,
            "train_batch_size": 1,
            "gradient_accumulation_steps": 4,
            "resolution": 1024,
            "validation_inference_steps": steps,
            "validation_guidance_scale": guidance,
        },
        sources=_SOURCES,
        trained={"resolution": 1024},
        tokenizer_files=_TOKENIZER_FILES,
        notes=notes,
    )


ENTRIES = [
    _entry(
        "Tongyi-MAI/Z-Image",
        "Z-Image 6B (base)",
        6.0,
        50,
        5.0,
        "the undistilled base: the model to train; its LoRAs also load on Turbo",
    ),
    _entry(
        "Tongyi-MAI/Z-Image-Turbo",
        "Z-Image-Turbo 6B",
        3.0,
        8,
        0.0,
        "step-distilled (8 steps, no CFG): training it directly drifts the distillation (the run says so)",
    ),
]
