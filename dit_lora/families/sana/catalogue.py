"""Sana checkpoints (``SanaPipeline``, ``Efficient-Large-Model/*``).

Where each fact was checked (no network at run time; these are copies of published files):
- Hub ids: the diffusers docs' Sana table (``docs/source/en/api/pipelines/sana.md``) and NVlabs/Sana
  ``asset/docs/model_zoo.md``; the 2K/4K and SANA 1.5 ids appear in model_zoo.md and on their Hub pages.
  ``Sana_600M_1024px_BF16_diffusers`` is in neither (the 600M releases are fp16/fp32 only).
- transformer/config.json: the Hub file of ``Sana_1600M_512px_MultiLing_diffusers`` (496 bytes) and
  ``Sana_1600M_1024px_MultiLing_diffusers`` (527 bytes, with ``interpolation_scale: null``), read in full; the
  600M, 2K, 4K and 1.5 values are what diffusers' ``scripts/convert_sana_to_diffusers.py`` writes for each
  model type (``sample_size = px // 32``; ``interpolation_scale`` None / 1.0 at 2K / 2.0 at 4K; ``qk_norm``
  only for 1.5), which the 1600M Hub files agree with.
- vae/config.json: ``Sana_600M_1024px_diffusers/vae/config.json`` (dc-ae-f32c32-sana-1.0), read in full.
- scheduler/scheduler_config.json: ``Sana_1600M_512px_diffusers`` (840 bytes), read in full; ``flow_shift`` 6.0
  at 4K per the conversion script and NVlabs ``configs/sana_config/4096ms/Sana_1600M_img4096_bf16.yaml``.
- text_encoder/config.json: Gemma-2-2B-it (``transformers.Gemma2Config`` defaults agree); tokenizer files:
  the Hub tree of ``Sana_1600M_1024px_BF16_diffusers/tokenizer``.
- Recommended LoRA: diffusers ``examples/dreambooth/train_dreambooth_lora_sana.py`` defaults (``--rank 4``,
  ``--lora_alpha 4``, ``--learning_rate 1e-4``, ``--max_sequence_length 300``); its README and NVlabs'
  ``train_scripts/train_lora.sh`` train with batch 1 x gradient accumulation 4 at lr 1e-4.
- Stored dtype: model_zoo.md's "Precision" column (600M and 1600M 512/1024: fp16/fp32; 1600M BF16, 2K, 4K:
  bf16/fp32; SANA 1.5: bf16); the diffusers docs load the BF16 repo in bfloat16 and the others in float16.

Not confirmed (kept out of signatures): the 600M and 2K/4K/1.5 transformer files byte for byte, which VAE
the 1.5 repos ship (the current conversion script loads dc-ae ``sana-1.1``), the 4.8B Hub repo's files.
"""

from __future__ import annotations

from dit_lora.catalogue.entry import Checkpoint

_MODEL_INDEX = {
    "_class_name": "SanaPipeline",
    "_diffusers_version": "0.32.0.dev0",
    "scheduler": ["diffusers", "DPMSolverMultistepScheduler"],
    "text_encoder": ["transformers", "Gemma2Model"],
    "tokenizer": ["transformers", "GemmaTokenizerFast"],
    "transformer": ["diffusers", "SanaTransformer2DModel"],
    "vae": ["diffusers", "AutoencoderDC"],
}
_VAE = {
    "_class_name": "AutoencoderDC",
    "_diffusers_version": "0.32.0.dev0",
    "_name_or_path": "mit-han-lab/dc-ae-f32c32-sana-1.0-diffusers",
    "attention_head_dim": 32,
    "decoder_act_fns": "silu",
    "decoder_block_out_channels": [128, 256, 512, 512, 1024, 1024],
    "decoder_block_types": [
        "ResBlock",
        "ResBlock",
        "ResBlock",
        "EfficientViTBlock",
        "EfficientViTBlock",
        "EfficientViTBlock",
    ],
    "decoder_layers_per_block": [3, 3, 3, 3, 3, 3],
    "decoder_norm_types": "rms_norm",
    "decoder_qkv_multiscales": [[], [], [], [5], [5], [5]],
    "downsample_block_type": "Conv",
    "encoder_block_out_channels": [128, 256, 512, 512, 1024, 1024],
    "encoder_block_types": [
        "ResBlock",
        "ResBlock",
        "ResBlock",
        "EfficientViTBlock",
        "EfficientViTBlock",
        "EfficientViTBlock",
    ],
    "encoder_layers_per_block": [2, 2, 2, 3, 3, 3],
    "encoder_qkv_multiscales": [[], [], [], [5], [5], [5]],
    "in_channels": 3,
    "latent_channels": 32,
    "scaling_factor": 0.41407,
    "upsample_block_type": "interpolate",
}
_GEMMA2_2B = {
    "architectures": ["Gemma2Model"],
    "model_type": "gemma2",
    "hidden_size": 2304,
    "intermediate_size": 9216,
    "num_hidden_layers": 26,
    "num_attention_heads": 8,
    "num_key_value_heads": 4,
    "head_dim": 256,
    "vocab_size": 256000,
    "max_position_embeddings": 8192,
    "sliding_window": 4096,
    "query_pre_attn_scalar": 256,
    "rms_norm_eps": 1e-06,
    "attn_logit_softcapping": 50.0,
    "final_logit_softcapping": 30.0,
    "hidden_activation": "gelu_pytorch_tanh",
    "rope_theta": 10000.0,
    "pad_token_id": 0,
    "bos_token_id": 2,
    "eos_token_id": [1, 107],
    "torch_dtype": "bfloat16",
}
_TOKENIZER_FILES = ("special_tokens_map.json", "tokenizer.json", "tokenizer.model", "tokenizer_config.json")
#: width and depth per model type (conversion script ``model_kwargs``)
_SIZES = {
    "600M": {
        "num_attention_heads": 36,
        "attention_head_dim": 32,
        "num_cross_attention_heads": 16,
        "cross_attention_head_dim": 72,
        "cross_attention_dim": 1152,
        "num_layers": 28,
    },
    "1600M": {
        "num_attention_heads": 70,
        "attention_head_dim": 32,
        "num_cross_attention_heads": 20,
        "cross_attention_head_dim": 112,
        "cross_attention_dim": 2240,
        "num_layers": 20,
    },
    "4800M": {
        "num_attention_heads": 70,
        "attention_head_dim": 32,
        "num_cross_attention_heads": 20,
        "cross_attention_head_dim": 112,
        "cross_attention_dim": 2240,
        "num_layers": 60,
    },
}
_INTERPOLATION = {512: None, 1024: None, 2048: 1.0, 4096: 2.0}
_SOURCES = {
    "defaults": "diffusers train_dreambooth_lora_sana.py defaults (rank 4, alpha 4, lr 1e-4)",
    "train_batch_size": "diffusers README_sana.md and NVlabs train_lora.sh (batch 1 x accumulation 4)",
    "gradient_accumulation_steps": "diffusers README_sana.md and NVlabs train_lora.sh (batch 1 x accumulation 4)",
    "resolution": "trained resolution: transformer sample_size x 32 (SanaPipeline's aspect-ratio bins)",
    "configs": "Hub files and diffusers scripts/convert_sana_to_diffusers.py (module docstring)",
}


def _transformer(size: str, px: int, *, v15: bool) -> dict:
    cfg = {
        "_class_name": "SanaTransformer2DModel",
        "_diffusers_version": "0.33.0.dev0",
        "attention_bias": False,
        "caption_channels": 2304,
        "dropout": 0.0,
        "in_channels": 32,
        "mlp_ratio": 2.5,
        "norm_elementwise_affine": False,
        "norm_eps": 1e-06,
        "out_channels": 32,
        "patch_size": 1,
        "sample_size": px // 32,
        "interpolation_scale": _INTERPOLATION[px],
        **_SIZES[size],
    }
    if v15:
        cfg["qk_norm"] = "rms_norm_across_heads"
    return cfg


def _scheduler(px: int) -> dict:
    return {
        "_class_name": "DPMSolverMultistepScheduler",
        "_diffusers_version": "0.32.0.dev0",
        "algorithm_type": "dpmsolver++",
        "beta_end": 0.02,
        "beta_schedule": "linear",
        "beta_start": 0.0001,
        "dynamic_thresholding_ratio": 0.995,
        "euler_at_final": False,
        "final_sigmas_type": "zero",
        "flow_shift": 6.0 if px == 4096 else 3.0,
        "lower_order_final": True,
        "num_train_timesteps": 1000,
        "prediction_type": "flow_prediction",
        "rescale_betas_zero_snr": False,
        "sample_max_value": 1.0,
        "solver_order": 2,
        "solver_type": "midpoint",
        "steps_offset": 0,
        "thresholding": False,
        "timestep_spacing": "linspace",
        "trained_betas": None,
        "use_beta_sigmas": False,
        "use_exponential_sigmas": False,
        "use_flow_sigmas": True,
        "use_karras_sigmas": False,
        "use_lu_lambdas": False,
        "variance_type": None,
    }


def _entry(
    hub_id: str, title: str, size: str, px: int, dtype: str, *, v15: bool = False, notes: str = ""
) -> Checkpoint:
    transformer = _transformer(size, px, v15=v15)
    identity = {
        k: transformer[k]
        for k in (
            "num_attention_heads",
            "attention_head_dim",
            "cross_attention_dim",
            "num_cross_attention_heads",
            "caption_channels",
            "sample_size",
        )
    }
    identity["qk_norm"] = transformer.get("qk_norm")
    return Checkpoint(
        hub_id=hub_id,
        family="sana",
        title=title,
        signature={"transformer/config.json": identity},
        depth={"transformer/config.json": {"num_layers": transformer["num_layers"]}},
        configs={
            "model_index.json": _MODEL_INDEX,
            "transformer/config.json": transformer,
            "vae/config.json": _VAE,
            "scheduler/scheduler_config.json": _scheduler(px),
            "text_encoder/config.json": _GEMMA2_2B,
        },
        stored_dtype=dtype,
        text_length=300,
        defaults={
            "rank": 4,
            "lora_alpha": 4,
            "learning_rate": 1e-4,
            "train_batch_size": 1,
            "gradient_accumulation_steps": 4,
            "resolution": px,
        },
        sources=_SOURCES,
        trained={"resolution": px},
        tokenizer_files=_TOKENIZER_FILES,
        notes=notes,
    )


ENTRIES = [
    _entry(
        "Efficient-Large-Model/Sana_600M_512px_diffusers",
        "Sana 0.6B 512 px",
        "600M",
        512,
        "fp16",
        notes="fp32 main files and an fp16 variant",
    ),
    _entry(
        "Efficient-Large-Model/Sana_600M_1024px_diffusers",
        "Sana 0.6B 1024 px",
        "600M",
        1024,
        "fp16",
        notes="fp32 main files and an fp16 variant; there is no BF16 600M release",
    ),
    _entry(
        "Efficient-Large-Model/Sana_1600M_512px_diffusers",
        "Sana 1.6B 512 px",
        "1600M",
        512,
        "fp16",
        notes="fp32 main files and an fp16 variant",
    ),
    _entry(
        "Efficient-Large-Model/Sana_1600M_1024px_diffusers",
        "Sana 1.6B 1024 px",
        "1600M",
        1024,
        "fp16",
        notes="fp32 main files and an fp16 variant; same architecture as the BF16 release",
    ),
    _entry(
        "Efficient-Large-Model/Sana_1600M_1024px_BF16_diffusers",
        "Sana 1.6B 1024 px (BF16)",
        "1600M",
        1024,
        "bf16",
        notes="fp32 main files and a bf16 variant (--variant bf16); the diffusers examples' model",
    ),
    _entry(
        "Efficient-Large-Model/Sana_1600M_2Kpx_BF16_diffusers",
        "Sana 1.6B 2K",
        "1600M",
        2048,
        "bf16",
        notes="sin-cos positions (interpolation_scale 1.0); not in the diffusers docs table",
    ),
    _entry(
        "Efficient-Large-Model/Sana_1600M_4Kpx_BF16_diffusers",
        "Sana 1.6B 4K",
        "1600M",
        4096,
        "bf16",
        notes="flow_shift 6.0, interpolation_scale 2.0; not in the diffusers docs table",
    ),
    _entry(
        "Efficient-Large-Model/SANA1.5_1.6B_1024px_diffusers",
        "SANA 1.5 1.6B 1024 px",
        "1600M",
        1024,
        "bf16",
        v15=True,
        notes="qk_norm rms_norm_across_heads; files carry no variant suffix",
    ),
    _entry(
        "Efficient-Large-Model/SANA1.5_4.8B_1024px_diffusers",
        "SANA 1.5 4.8B 1024 px",
        "4800M",
        1024,
        "bf16",
        v15=True,
        notes="listed in NVlabs model_zoo.md; its Hub files were not seen (config per the conversion script)",
    ),
]
