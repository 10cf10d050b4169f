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

SANA-Sprint (``REFUSED``: recognised, not trained; :data:`SPRINT_REFUSAL` says why): the Hub ids are the diffusers
docs' table (``docs/source/en/api/pipelines/sana_sprint.md``); the transformer is what
``scripts/convert_sana_to_diffusers.py`` writes for ``SanaSprint_1600M_P1_D20`` / ``SanaSprint_600M_P1_D28`` (the
SanaMS widths, ``qk_norm`` across heads, ``guidance_embeds: true``), the scheduler its ``--scheduler_type scm``
(``SCMScheduler``: trigflow, ``sigma_data`` 0.5) and the pipeline ``SanaSprintPipeline`` (NVlabs
``asset/docs/sana_sprint.md``'s conversion command). Not confirmed: the Hub files byte for byte.

Not confirmed (kept out of signatures): the 600M and 2K/4K/1.5 transformer files byte for byte, which VAE
the 1.5 repos ship (the current conversion script loads dc-ae ``sana-1.1``), the 4.8B Hub repo's files.
"""

from __future__ import annotations

import dataclasses

from dit_lora.catalogue.entry import Checkpoint
from dit_lora.catalogue.text_encoders import GEMMA2_2B, GEMMA_TOKENIZER_FILES

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
            "text_encoder/config.json": GEMMA2_2B,
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
        tokenizer_files=GEMMA_TOKENIZER_FILES,
        notes=notes,
    )


#: why a Sprint checkpoint is refused, where the model is recognised (``{model}``: the path or Hub id given)
SPRINT_REFUSAL = (
    "`{model}` is SANA-Sprint (a SanaSprintPipeline, whose transformer/config.json has `guidance_embeds: true`), "
    "which dit-lora does not train. Sprint is a consistency model: its sampler (diffusers "
    "`SanaSprintPipeline.__call__` with `SCMScheduler.step`) feeds the transformer flow time in [0, 1] and a "
    "guidance embedding, reads its output as a TrigFlow velocity and jumps to x0 = cos(s) x_s - sin(s) F in 1-4 "
    "steps; it was made by sCM + LADD distillation (NVlabs/Sana train_scripts/train_scm_ladd.py; diffusers "
    "examples/research_projects/sana/train_sana_sprint_diffusers.py: the `SanaTrigFlow` wrapper, a JVP tangent "
    "through the model against a frozen teacher, the `logvar_linear` weighting and the `SanaMSCMDiscriminator` "
    "heads), not with a loss on your images. dit-lora's rectified-flow loss (0-1000 timesteps, velocity target) "
    "would pull it back towards a many-step flow model and spoil its 1-4 step samples. Train the LoRA on a "
    "non-distilled Sana instead (--pretrained_model_name_or_path "
    "Efficient-Large-Model/SANA1.5_1.6B_1024px_diffusers or Efficient-Large-Model/Sana_600M_1024px_diffusers) and "
    "sample it with SanaPipeline, or distill a Sprint model of your own with NVlabs' train_scm_ladd.sh."
)


def _sprint(hub_id: str, title: str, size: str) -> Checkpoint:
    """A SANA-Sprint release: recognised by its guidance embedding (``guidance_embeds``), refused."""
    base = _entry(hub_id, title, size, 1024, "bf16", v15=True)
    transformer = {**base.configs["transformer/config.json"], "guidance_embeds": True}
    index = {**_MODEL_INDEX, "_class_name": "SanaSprintPipeline", "scheduler": ["diffusers", "SCMScheduler"]}
    scheduler = {"_class_name": "SCMScheduler", "num_train_timesteps": 1000, "prediction_type": "trigflow",
                 "sigma_data": 0.5}  # fmt: skip
    signature = {"transformer/config.json": {**base.signature["transformer/config.json"], "guidance_embeds": True}}
    configs = {**base.configs, "model_index.json": index, "transformer/config.json": transformer,
               "scheduler/scheduler_config.json": scheduler}  # fmt: skip
    sources = {"configs": "diffusers sana_sprint.md and scripts/convert_sana_to_diffusers.py (module docstring)"}
    return dataclasses.replace(
        base, signature=signature, configs=configs, defaults={}, sources=sources, refusal=SPRINT_REFUSAL,
        notes="few-step (1-4) sCM + LADD distillation; its sampler needs that objective, not a flow-matching LoRA",
    )  # fmt: skip


REFUSED = [
    _sprint("Efficient-Large-Model/Sana_Sprint_1.6B_1024px_diffusers", "SANA-Sprint 1.6B 1024 px", "1600M"),
    _sprint("Efficient-Large-Model/Sana_Sprint_0.6B_1024px_diffusers", "SANA-Sprint 0.6B 1024 px", "600M"),
]

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
