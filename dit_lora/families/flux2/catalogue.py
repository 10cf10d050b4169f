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
"""

from __future__ import annotations

from typing import Any

from dit_lora.catalogue.entry import Checkpoint

_SCHEDULER = {
    "_class_name": "FlowMatchEulerDiscreteScheduler",
    "base_image_seq_len": 256,
    "base_shift": 0.5,
    "max_image_seq_len": 4096,
    "max_shift": 1.15,
    "num_train_timesteps": 1000,
    "shift": 3.0,
    "use_dynamic_shifting": True,
}
_VAE = {
    "_class_name": "AutoencoderKLFlux2",
    "in_channels": 3,
    "out_channels": 3,
    "down_block_types": ["DownEncoderBlock2D"] * 4,
    "up_block_types": ["UpDecoderBlock2D"] * 4,
    "block_out_channels": [128, 256, 512, 512],
    "decoder_block_out_channels": None,
    "layers_per_block": 2,
    "act_fn": "silu",
    "latent_channels": 32,
    "norm_num_groups": 32,
    "sample_size": 1024,
    "use_quant_conv": True,
    "use_post_quant_conv": True,
    "mid_block_add_attention": True,
    "batch_norm_eps": 0.0001,
    "batch_norm_momentum": 0.1,
    "patch_size": [2, 2],
}
_MISTRAL_SMALL = {
    "architectures": ["Mistral3ForConditionalGeneration"],
    "model_type": "mistral3",
    "image_token_index": 10,
    "multimodal_projector_bias": False,
    "projector_hidden_act": "gelu",
    "spatial_merge_size": 2,
    "vision_feature_layer": -1,
    "text_config": {
        "model_type": "mistral",
        "hidden_size": 5120,
        "intermediate_size": 32768,
        "num_hidden_layers": 40,
        "num_attention_heads": 32,
        "num_key_value_heads": 8,
        "head_dim": 128,
        "vocab_size": 131072,
        "max_position_embeddings": 131072,
        "rms_norm_eps": 1e-05,
        "rope_theta": 1000000000.0,
        "sliding_window": None,
        "hidden_act": "silu",
    },
    "vision_config": {
        "model_type": "pixtral",
        "hidden_size": 1024,
        "intermediate_size": 4096,
        "num_hidden_layers": 24,
        "num_attention_heads": 16,
        "head_dim": 64,
        "image_size": 1540,
        "patch_size": 14,
        "rope_theta": 10000.0,
        "hidden_act": "silu",
    },
    "torch_dtype": "bfloat16",
}


def _qwen3(hidden: int, intermediate: int, tied: bool) -> dict[str, Any]:
    return {
        "architectures": ["Qwen3ForCausalLM"],
        "model_type": "qwen3",
        "hidden_size": hidden,
        "intermediate_size": intermediate,
        "num_hidden_layers": 36,
        "num_attention_heads": 32,
        "num_key_value_heads": 8,
        "head_dim": 128,
        "vocab_size": 151936,
        "max_position_embeddings": 40960,
        "rms_norm_eps": 1e-06,
        "rope_theta": 1000000,
        "hidden_act": "silu",
        "tie_word_embeddings": tied,
        "bos_token_id": 151643,
        "eos_token_id": 151645,
        "torch_dtype": "bfloat16",
    }


#: transformer width and depth per model type (conversion script ``get_flux2_transformer_config``)
_SIZES = {
    "dev": {"num_layers": 8, "num_single_layers": 48, "num_attention_heads": 48, "joint_attention_dim": 15360},
    "klein-4b": {"num_layers": 5, "num_single_layers": 20, "num_attention_heads": 24, "joint_attention_dim": 7680},
    "klein-9b": {"num_layers": 8, "num_single_layers": 24, "num_attention_heads": 32, "joint_attention_dim": 12288},
}
_TEXT = {
    "dev": _MISTRAL_SMALL,
    "klein-4b": _qwen3(2560, 9728, tied=True),
    "klein-9b": _qwen3(4096, 12288, tied=False),
}
_SOURCES = {
    "hub_id": "diffusers examples/dreambooth/README_flux2.md; musubi-tuner docs/flux_2.md",
    "transformer": "diffusers scripts/convert_flux2_to_diffusers.py get_flux2_transformer_config",
    "vae": "AutoencoderKLFlux2() defaults (the conversion script)",
    "scheduler": "FLUX.1-dev scheduler_config.json (the conversion script copies it)",
    "text_encoder": "Mistral-Small-3.2-24B-Instruct-2506 / Qwen3-4B / Qwen3-8B config.json",
    "defaults": "diffusers README_flux2 (resolution 1024, batch 1 x 4, lr 1e-4), train script --rank 4",
    "sampling": "Flux2Pipeline defaults (50 steps, guidance 4); musubi-tuner docs/flux_2.md (klein steps, CFG)",
}
_MISTRAL_TOKENIZER = (
    "chat_template.jinja",
    "preprocessor_config.json",
    "processor_config.json",
    "special_tokens_map.json",
    "tokenizer.json",
    "tokenizer_config.json",
)
_QWEN_TOKENIZER = (
    "added_tokens.json",
    "merges.txt",
    "special_tokens_map.json",
    "tokenizer.json",
    "tokenizer_config.json",
    "vocab.json",
)


def _transformer(size: str) -> dict[str, Any]:
    return {
        "_class_name": "Flux2Transformer2DModel",
        "patch_size": 1,
        "in_channels": 128,
        "out_channels": None,
        "attention_head_dim": 128,
        "timestep_guidance_channels": 256,
        "mlp_ratio": 3.0,
        "axes_dims_rope": [32, 32, 32, 32],
        "rope_theta": 2000,
        "eps": 1e-06,
        "guidance_embeds": size == "dev",
        **_SIZES[size],
    }


def _model_index(size: str, distilled: bool) -> dict[str, Any]:
    if size == "dev":
        return {
            "_class_name": "Flux2Pipeline",
            "scheduler": ["diffusers", "FlowMatchEulerDiscreteScheduler"],
            "text_encoder": ["transformers", "Mistral3ForConditionalGeneration"],
            "tokenizer": ["transformers", "PixtralProcessor"],
            "transformer": ["diffusers", "Flux2Transformer2DModel"],
            "vae": ["diffusers", "AutoencoderKLFlux2"],
        }
    return {
        "_class_name": "Flux2KleinPipeline",
        "is_distilled": distilled,
        "scheduler": ["diffusers", "FlowMatchEulerDiscreteScheduler"],
        "text_encoder": ["transformers", "Qwen3ForCausalLM"],
        "tokenizer": ["transformers", "Qwen2TokenizerFast"],
        "transformer": ["diffusers", "Flux2Transformer2DModel"],
        "vae": ["diffusers", "AutoencoderKLFlux2"],
    }


def _entry(hub_id: str, title: str, size: str, distilled: bool, notes: str) -> Checkpoint:
    transformer = _transformer(size)
    identity = {
        k: transformer[k] for k in ("num_attention_heads", "joint_attention_dim", "in_channels", "guidance_embeds")
    }
    signature: dict[str, dict[str, Any]] = {"transformer/config.json": identity}
    if size != "dev":  # the base and distilled klein repos differ in model_index.json alone
        signature["model_index.json"] = {"_class_name": "Flux2KleinPipeline", "is_distilled": distilled}
    steps, guidance = (4, 1.0) if distilled and size != "dev" else (50, 4.0)
    return Checkpoint(
        hub_id=hub_id,
        family="flux2",
        title=title,
        signature=signature,
        depth={"transformer/config.json": {k: transformer[k] for k in ("num_layers", "num_single_layers")}},
        configs={
            "model_index.json": _model_index(size, distilled),
            "transformer/config.json": transformer,
            "vae/config.json": _VAE,
            "scheduler/scheduler_config.json": _SCHEDULER,
            "text_encoder/config.json": _TEXT[size],
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
            "max_sequence_length": 512,
            "validation_inference_steps": steps,
            "validation_guidance_scale": guidance,
        },
        sources=_SOURCES,
        trained={"resolution": 1024},
        tokenizer_files=_MISTRAL_TOKENIZER if size == "dev" else _QWEN_TOKENIZER,
        notes=notes,
    )


ENTRIES = [
    _entry(
        "black-forest-labs/FLUX.2-dev",
        "FLUX.2 [dev] 32B",
        "dev",
        True,
        "guidance-distilled (a guidance embedding, trained at --flux2_train_guidance 1); Mistral Small 3.2 24B "
        "text encoder; non-commercial license",
    ),
    _entry(
        "black-forest-labs/FLUX.2-klein-base-4B",
        "FLUX.2 [klein] base 4B",
        "klein-4b",
        False,
        "undistilled: the klein model to train (musubi-tuner, SimpleTuner); Qwen3-4B; Apache-2.0",
    ),
    _entry(
        "black-forest-labs/FLUX.2-klein-4B",
        "FLUX.2 [klein] 4B",
        "klein-4b",
        True,
        "step-distilled (4 steps, no CFG); Qwen3-4B; Apache-2.0",
    ),
    _entry(
        "black-forest-labs/FLUX.2-klein-base-9B",
        "FLUX.2 [klein] base 9B",
        "klein-9b",
        False,
        "undistilled; Qwen3-8B; non-commercial license",
    ),
    _entry(
        "black-forest-labs/FLUX.2-klein-9B",
        "FLUX.2 [klein] 9B",
        "klein-9b",
        True,
        "step-distilled (4 steps, no CFG); Qwen3-8B; non-commercial license",
    ),
]
