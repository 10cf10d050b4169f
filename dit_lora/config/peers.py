"""Flags of other trainers that users bring along, and what dit-lora calls them.

:data:`PEER_FLAGS` maps an option name of diffusers' training examples, kohya's sd-scripts and musubi-tuner,
SimpleTuner and ai-toolkit (its YAML keys) to the dit-lora option of the same meaning (or None: none) with a
note, and the file of the peer's source it was read from (:data:`SOURCES`). The unknown-option message
(:func:`peer_hint`) reads it before any "did you mean" guess, so a flag of another trainer is never matched to a
look-alike with another meaning (``--instance_prompt`` is not ``--validation_prompt``). :data:`SAME_NAMES` lists
the peers' options that dit-lora spells the same way. ``docs/guides/migrating.md`` holds the tables
:func:`migration_tables` writes from both; tests keep the page, this table and dit-lora's options in agreement.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from dit_lora.config import peers_llamafactory as llamafactory
from dit_lora.config import peers_memory as memory
from dit_lora.config.owners import owners


@dataclass(frozen=True)
class Peer:
    """Another trainer's option: who uses it, the dit-lora option of the same meaning (None: none), a note, and
    where it was read (keys of :data:`SOURCES`)."""

    trainers: str
    option: str | None
    note: str = ""  #: what to know beside the counterpart, or why there is none
    fallback: str = ""  #: said while ``option`` is not (yet) an option of the run
    sources: tuple[str, ...] = ()  #: the peer files that define it (:data:`SOURCES` keys)
    #: the same meaning under another name in some families: (dit-lora option, note), said before ``option`` when
    #: the run has it (diffusers' FLUX.2 script's --guidance_scale is the guidance FLUX.2 [dev] trains at)
    also: tuple[tuple[str, str], ...] = ()


#: the peers' files each entry was checked against (the snapshot read for docs/guides/migrating.md, 2026)
SOURCES: dict[str, str] = {
    "d-sana": "diffusers examples/dreambooth/train_dreambooth_lora_sana.py",
    "d-flux": "diffusers examples/dreambooth/train_dreambooth_lora_flux.py",
    "d-flux2": "diffusers examples/dreambooth/train_dreambooth_lora_flux2.py",
    "d-t2i": "diffusers examples/text_to_image/train_text_to_image_lora.py",
    "d-cog": "diffusers examples/cogvideo/train_cogvideox_lora.py",
    "k-util": "sd-scripts library/train_util.py",
    "k-net": "sd-scripts train_network.py",
    "m-common": "musubi-tuner src/musubi_tuner/training/parser_common.py",
    "m-wan": "musubi-tuner src/musubi_tuner/wan_train_network.py",
    "st": "SimpleTuner documentation/OPTIONS.md",
    "st-fields": "SimpleTuner simpletuner/simpletuner_sdk/server/services/field_registry/sections/",
    "at": "ai-toolkit toolkit/config_modules.py",
    "at-yaml": "ai-toolkit config/examples/train_lora_flux_24gb.yaml",
    "dp": "diffusion-pipe examples/main_example.toml",
    **llamafactory.SOURCES,
    **memory.SOURCES,
}

#: the peers, in the page's order: key -> (title, the words of ``Peer.trainers`` that name it)
PEERS: dict[str, tuple[str, tuple[str, ...]]] = {
    "diffusers": ("diffusers' training examples", ("diffusers",)),
    "kohya": ("kohya sd-scripts and musubi-tuner", ("sd-scripts", "musubi-tuner")),
    "simpletuner": ("SimpleTuner", ("SimpleTuner",)),
    "ai-toolkit": ("ai-toolkit (YAML keys)", ("ai-toolkit",)),
    "diffusion-pipe": ("diffusion-pipe (TOML keys)", ("diffusion-pipe",)),
    "onetrainer": ("OneTrainer (keys of its config JSON and presets)", ("OneTrainer",)),
    "llamafactory": ("LLaMA-Factory (YAML keys; the video LLMs)", (llamafactory.TRAINER,)),
}

_DATA = "one folder of images or clips with captions (--train_data_dir) or a dataset (--dataset_name)"
_PRIOR = "dit-lora has no prior preservation (class images); train on the instance data alone"
_ADAMW = (
    "dit-lora trains with AdamW (--adam_beta1/--adam_beta2/--adam_weight_decay/--adam_epsilon); "
    "--use_8bit_adam for bitsandbytes' 8-bit AdamW; Prodigy, Adafactor and others are not offered"
)
_REPEATS = "name the image folder N_words (kohya's layout, e.g. 10_sks/) to repeat its images N times"
_LYCORIS = (
    "lycoris.kohya with network_args algo=lokr or algo=loha is --lora_type lokr or loha (PEFT's LoKr/LoHa); "
    "networks.lora is --lora_type lora; DoRA is --lora_type dora (or --use_dora)"
)
_LYCORIS_ARGS = (
    "algo=lokr|loha: --lora_type lokr|loha; factor=N: --lokr_factor N; decompose_both=True: --lokr_decompose_both; "
    "rank_dropout/module_dropout: --rank_dropout/--module_dropout; use_tucker=True: --use_effective_conv2d; "
    "dora_wd=True with algo=lora: --lora_type dora (PEFT has no DoRA LoKr/LoHa); conv_dim/conv_alpha and presets: "
    "--lora_layers picks the layers, one rank for all. A LoKr whose --rank keeps both factors whole (a full matrix) "
    "takes scale 1 in LyCORIS whatever its alpha, PEFT alpha / rank: leave --lora_alpha unset there"
)
_LYCORIS_CONFIG = (
    "no JSON: its keys are flags: algo lokr|loha -> --lora_type, linear_dim -> --rank, linear_alpha -> "
    "--lora_alpha (but a full-matrix LoKr, linear_dim 10000, takes scale 1 in LyCORIS: leave --lora_alpha unset), "
    "factor -> --lokr_factor, apply_preset target_module -> --lora_layers"
)
_STEPS = "dit-lora counts in updates (optimizer steps), not epochs"
_CAPTIONS = (
    "captions come from the caption file beside each image (--caption_extension), metadata.jsonl or the "
    "caption column; --instance_prompt gives every image one caption"
)
_HELD_OUT_DRAW = (
    "each held-out sample is evaluated at one noise and timestep drawn from the training density by --seed and the "
    "sample's name, the same at every evaluation"
)
_DROPOUT = (
    "the same share of samples trained on the empty caption (decided per seed, epoch and sample; the empty "
    "caption encoded once into the latent cache)"
)

#: another trainer's option name -> its dit-lora counterpart (only names that are not dit-lora options themselves)
PEER_FLAGS: dict[str, Peer] = {
    # diffusers' training examples
    "class_data_dir": Peer("diffusers DreamBooth", None, _PRIOR, sources=("d-sana",)),
    "class_prompt": Peer("diffusers DreamBooth", None, _PRIOR, sources=("d-sana",)),
    "with_prior_preservation": Peer("diffusers DreamBooth", None, _PRIOR, sources=("d-sana",)),
    "num_class_images": Peer("diffusers DreamBooth", None, _PRIOR, sources=("d-sana",)),
    "sample_batch_size": Peer("diffusers DreamBooth", None, _PRIOR, sources=("d-sana",)),
    "prior_loss_weight": Peer("diffusers DreamBooth, sd-scripts", None, _PRIOR, sources=("d-sana", "k-util")),
    "repeats": Peer("diffusers DreamBooth", None, _REPEATS, sources=("d-sana",)),
    "validation_epochs": Peer("diffusers", "validation_steps", _STEPS, sources=("d-sana", "d-t2i", "d-cog")),
    "num_validation_videos": Peer("diffusers CogVideoX", "num_validation_images", sources=("d-cog",)),
    "validation_prompt_separator": Peer(
        "diffusers CogVideoX", None, "dit-lora samples one --validation_prompt", sources=("d-cog",)
    ),
    "instance_data_root": Peer(
        "diffusers CogVideoX", "train_data_dir", "a folder of clips with a caption file beside each", sources=("d-cog",)
    ),
    "id_token": Peer(
        "diffusers CogVideoX",
        None,
        "write the token into the captions, or give one caption with --instance_prompt",
        sources=("d-cog",),
    ),
    "skip_frames_start": Peer(
        "diffusers CogVideoX",
        None,
        "trim the clips beforehand; --frame_sampling chooses which frames a clip gives",
        sources=("d-cog",),
    ),
    "skip_frames_end": Peer(
        "diffusers CogVideoX",
        None,
        "trim the clips beforehand; --frame_sampling chooses which frames a clip gives",
        sources=("d-cog",),
    ),
    "tracker_name": Peer("diffusers CogVideoX", "tracker_project_name", sources=("d-cog",)),
    "guidance_scale": Peer(
        "diffusers CogVideoX and FLUX.2, ai-toolkit",
        "validation_guidance_scale",
        "the guidance of the validation samples",
        sources=("d-cog", "d-flux2", "at"),
        also=(
            (
                "flux2_train_guidance",
                "diffusers' FLUX.2 script trains FLUX.2 [dev]'s guidance embedding at it (default 3.5 there, 1.0 here "
                "as musubi-tuner, ai-toolkit and SimpleTuner train it); the validation samples' is "
                "--validation_guidance_scale",
            ),
        ),
    ),
    "text_encoder_out_layers": Peer(
        "diffusers FLUX.2",
        None,
        "the text encoder's layers are the pipeline's own (FLUX.2 [dev] 10, 20, 30; klein 9, 18, 27), so the adapter "
        "trains on what the pipeline feeds it",
        sources=("d-flux2",),
    ),
    "train_text_encoder": Peer(
        "diffusers", None, "the text encoder stays frozen; LoRA goes on the transformer", sources=("d-flux",)
    ),
    "text_encoder_lr": Peer(
        "diffusers, sd-scripts", None, "the text encoder stays frozen", sources=("d-flux", "k-net")
    ),
    "optimizer": Peer("diffusers, SimpleTuner, ai-toolkit", None, _ADAMW, sources=("d-sana", "st", "at")),
    "prodigy_beta3": Peer("diffusers", None, _ADAMW, sources=("d-sana",)),
    "prodigy_decouple": Peer("diffusers", None, _ADAMW, sources=("d-sana",)),
    "prodigy_use_bias_correction": Peer("diffusers", None, _ADAMW, sources=("d-sana",)),
    "prodigy_safeguard_warmup": Peer("diffusers", None, _ADAMW, sources=("d-sana",)),
    "hub_token": Peer(
        "diffusers",
        None,
        "log in once with `hf auth login` (or set HF_TOKEN): tokens are not flags",
        sources=("d-sana",),
    ),
    "upcast_before_saving": Peer(
        "diffusers", None, "the LoRA weights are fp32 masters throughout: nothing to upcast", sources=("d-sana",)
    ),
    "offload": Peer(
        "diffusers",
        None,
        "the encoders are released after the latent cache is built "
        "(--cache_latents, on by default); `dit-lora plan` says what fits",
        sources=("d-sana",),
    ),
    "enable_vae_tiling": Peer("diffusers", "enable_tiling", sources=("d-sana",)),
    "enable_xformers_memory_efficient_attention": Peer("diffusers", "attention_backend", sources=("d-t2i",)),
    "noise_offset": Peer("diffusers, sd-scripts", None, "dit-lora adds no noise offset", sources=("d-t2i", "k-util")),
    "snr_gamma": Peer(
        "diffusers, SimpleTuner",
        None,
        "the flow-matching families weight timesteps by their "
        "density instead (Sana: --weighting_scheme; CogVideoX and Wan: --timestep_sampling)",
        sources=("d-t2i", "st"),
    ),
    "prediction_type": Peer("diffusers", None, "the family's scheduler sets the target", sources=("d-t2i",)),
    "local_rank": Peer(
        "diffusers",
        None,
        "the launcher sets it: start several processes with `dit-lora launch --multi_gpu`",
        sources=("d-sana",),
    ),
    # kohya sd-scripts / musubi-tuner
    "network_dim": Peer("sd-scripts, musubi-tuner", "rank", sources=("k-net", "m-common")),
    "network_alpha": Peer(
        "sd-scripts, musubi-tuner",
        "lora_alpha",
        "the saved adapter has alpha/rank folded in, so it loads at the trained strength",
        sources=("k-net", "m-common"),
    ),
    "network_dropout": Peer("sd-scripts, musubi-tuner", "lora_dropout", sources=("k-net", "m-common")),
    "network_module": Peer("sd-scripts, musubi-tuner", "lora_type", _LYCORIS, sources=("k-net", "m-common")),
    "network_args": Peer("sd-scripts, musubi-tuner", "lora_type", _LYCORIS_ARGS, sources=("k-net", "m-common")),
    "network_weights": Peer(
        "sd-scripts, musubi-tuner",
        None,
        "dit-lora does not start from another adapter; continue a dit-lora run with --resume_from_checkpoint",
        sources=("k-net", "m-common"),
    ),
    "dataset_config": Peer(
        "sd-scripts, musubi-tuner",
        None,
        f"no TOML dataset config: {_DATA} per run (docs/guides/migrating.md)",
        sources=("k-util", "m-common"),
    ),
    "enable_bucket": Peer(
        "sd-scripts",
        "aspect_buckets",
        "on by default (`auto`)",
        fallback="images are resized and cropped to the --resolution square",
        sources=("k-util",),
    ),
    "bucket_reso_steps": Peer(
        "sd-scripts", None, "buckets step by the model's own stride (VAE factor x patch size)", sources=("k-util",)
    ),
    "min_bucket_reso": Peer(
        "sd-scripts",
        None,
        "--aspect_buckets auto spans the shapes near --resolution squared pixels",
        sources=("k-util",),
    ),
    "max_bucket_reso": Peer(
        "sd-scripts",
        None,
        "--aspect_buckets auto spans the shapes near --resolution squared pixels",
        sources=("k-util",),
    ),
    "dataset_repeats": Peer("sd-scripts", None, _REPEATS, sources=("k-util",)),
    "reg_data_dir": Peer("sd-scripts", None, _PRIOR, sources=("k-util",)),
    "caption_extention": Peer(
        "sd-scripts",
        "caption_extension",
        "sd-scripts also accepts this misspelling; dit-lora takes only the correct spelling",
        sources=("k-util",),
    ),
    "caption_dropout_rate": Peer(
        "sd-scripts, ai-toolkit", "caption_dropout_probability", _DROPOUT, sources=("k-util", "at")
    ),
    "shuffle_caption": Peer("sd-scripts", None, "captions are used as written", sources=("k-util",)),
    "keep_tokens": Peer("sd-scripts", None, "captions are used as written", sources=("k-util",)),
    "flip_aug": Peer("sd-scripts", "random_flip", sources=("k-util",)),
    "random_crop": Peer(
        "sd-scripts, ai-toolkit",
        None,
        "random crops are dit-lora's default (one fixed crop per image); --center_crop centres them",
        sources=("k-util", "at"),
    ),
    "cache_latents_to_disk": Peer(
        "sd-scripts, ai-toolkit",
        "cache_latents",
        "the cache is on disk (--cache_dir) and on by default",
        sources=("k-util", "at"),
    ),
    "cache_text_encoder_outputs": Peer(
        "sd-scripts", "cache_latents", "the cache holds the text embeddings too", sources=("k-util",)
    ),
    "max_train_epochs": Peer("sd-scripts, musubi-tuner", "num_train_epochs", sources=("k-util", "m-common")),
    "output_name": Peer(
        "sd-scripts, musubi-tuner",
        None,
        "the adapter is always pytorch_lora_weights.safetensors in --output_dir: name the folder",
        sources=("k-util", "m-common"),
    ),
    "save_model_as": Peer(
        "sd-scripts",
        None,
        "dit-lora writes safetensors only (diffusers' key names; `dit-lora export` converts)",
        sources=("k-net",),
    ),
    "save_precision": Peer(
        "sd-scripts, musubi-tuner",
        None,
        "the adapter is saved from the fp32 LoRA masters",
        sources=("k-util", "m-common"),
    ),
    "save_every_n_steps": Peer(
        "sd-scripts, musubi-tuner",
        "checkpointing_steps",
        "each checkpoint-<step>/ is the whole training state",
        sources=("k-util", "m-common"),
    ),
    "save_every_n_epochs": Peer(
        "sd-scripts, musubi-tuner",
        None,
        "checkpoints are counted in updates: --checkpointing_steps",
        sources=("k-util", "m-common"),
    ),
    "save_last_n_steps": Peer(
        "sd-scripts, musubi-tuner",
        "checkpoints_total_limit",
        "kohya's is a number of steps, dit-lora's a number of checkpoints: N / --checkpointing_steps",
        sources=("k-util", "m-common"),
    ),
    "save_last_n_epochs": Peer(
        "sd-scripts, musubi-tuner",
        "checkpoints_total_limit",
        "dit-lora keeps the last N checkpoints",
        sources=("k-util", "m-common"),
    ),
    "save_state": Peer(
        "sd-scripts, musubi-tuner",
        None,
        "every checkpoint is the whole state (optimizer, RNG, data position): nothing to turn on",
        sources=("k-util", "m-common"),
    ),
    "save_state_on_train_end": Peer(
        "sd-scripts, musubi-tuner",
        None,
        "the last update is always kept as a checkpoint",
        sources=("k-util", "m-common"),
    ),
    "resume": Peer(
        "sd-scripts, musubi-tuner",
        "resume_from_checkpoint",
        "a checkpoint folder, or `latest`",
        sources=("k-util", "m-common"),
    ),
    "max_data_loader_n_workers": Peer(
        "sd-scripts, musubi-tuner", "dataloader_num_workers", sources=("k-util", "m-common")
    ),
    "persistent_data_loader_workers": Peer(
        "sd-scripts, musubi-tuner", None, "the data loader is set up once per run", sources=("k-util", "m-common")
    ),
    "sample_every_n_steps": Peer("sd-scripts, musubi-tuner", "validation_steps", sources=("k-util", "m-common")),
    "sample_every_n_epochs": Peer(
        "sd-scripts, musubi-tuner", "validation_steps", _STEPS, sources=("k-util", "m-common")
    ),
    "sample_prompts": Peer(
        "sd-scripts, musubi-tuner", "validation_prompt", "one prompt, not a file", sources=("k-util", "m-common")
    ),
    "optimizer_type": Peer("sd-scripts, musubi-tuner", None, _ADAMW, sources=("k-util", "m-common")),
    "optimizer_args": Peer("sd-scripts, musubi-tuner", None, _ADAMW, sources=("k-util", "m-common")),
    "lr_scheduler_num_cycles": Peer("sd-scripts, musubi-tuner", "lr_num_cycles", sources=("k-util", "m-common")),
    "lr_scheduler_power": Peer("sd-scripts, musubi-tuner", "lr_power", sources=("k-util", "m-common")),
    "unet_lr": Peer("sd-scripts", "learning_rate", sources=("k-net",)),
    "full_bf16": Peer(
        "sd-scripts, musubi-tuner",
        None,
        "the LoRA weights stay fp32 masters; --mixed_precision bf16 (the default) is the compute precision",
        sources=("k-util", "m-common"),
    ),
    "full_fp16": Peer(
        "sd-scripts, musubi-tuner",
        None,
        "the LoRA weights stay fp32 masters; fp16 compute needs --mixed_precision fp16 --allow_fp16",
        sources=("k-util", "m-common"),
    ),
    "fp8_base": Peer(
        "sd-scripts, musubi-tuner",
        "quantize_base",
        "--quantize_base fp8_scaled (fp8 weights with per-block scales, any GPU), or fp8 (torchao, CUDA 8.9+)",
        sources=("k-util", "m-common"),
    ),
    "fp8_scaled": Peer(
        "musubi-tuner",
        "quantize_base",
        "--quantize_base fp8_scaled (a scale per 64 inputs, as its block mode)",
        sources=("m-wan",),
    ),
    "fp8_t5": Peer("musubi-tuner", "quantize_text_encoder", "nf4 through bitsandbytes, not fp8", sources=("m-wan",)),
    "fp8_llm": Peer(
        "musubi-tuner", "quantize_text_encoder", "nf4 through bitsandbytes, not fp8", sources=("m-common",)
    ),
    "gradient_checkpointing_cpu_offload": Peer(
        "musubi-tuner",
        "activation_offloading",
        "musubi offloads the checkpointed blocks' inputs and needs --gradient_checkpointing; --activation_offloading "
        "offloads every activation the model's forward saves (under --gradient_checkpointing, those inputs)",
        sources=("m-common",),
    ),
    "sdpa": Peer(
        "sd-scripts, musubi-tuner", "attention_backend", "--attention_backend sdpa", sources=("k-util", "m-common")
    ),
    "xformers": Peer(
        "sd-scripts, musubi-tuner",
        "attention_backend",
        "xformers is not used: --attention_backend auto picks FA3 or cuDNN SDPA",
        sources=("k-util", "m-common"),
    ),
    "torch_compile": Peer("sd-scripts", "compile", "--compile blocks", sources=("k-util",)),
    "log_with": Peer("sd-scripts, musubi-tuner", "report_to", sources=("k-util", "m-common")),
    "log_tracker_name": Peer("sd-scripts, musubi-tuner", "tracker_project_name", sources=("k-util", "m-common")),
    "huggingface_repo_id": Peer(
        "sd-scripts, musubi-tuner", "hub_model_id", "with --push_to_hub", sources=("k-util", "m-common")
    ),
    "huggingface_repo_visibility": Peer("sd-scripts, musubi-tuner", "hub_private", sources=("k-util", "m-common")),
    "dit": Peer(
        "musubi-tuner",
        "transformer_file",
        "a single-file transformer; --pretrained_model_name_or_path "
        "(the diffusers folder or Hub id) still gives its config, the VAE and the text encoder",
        sources=("m-common",),
    ),
    "vae": Peer(
        "sd-scripts, musubi-tuner",
        None,
        "the VAE comes from --pretrained_model_name_or_path",
        sources=("k-util", "m-common"),
    ),
    "task": Peer(
        "musubi-tuner", "family", "the model folder says which Wan it is; --family wan or wan_i2v", sources=("m-wan",)
    ),
    "discrete_flow_shift": Peer(
        "musubi-tuner",
        "flow_shift",
        sources=("m-common",),
        also=(
            ("flux2_shift", "a fixed shift in place of the checkpoint's dynamic one"),
            ("qwen_fixed_shift", "with --qwen_shift_mode fixed, in place of the dynamic shift"),
        ),
    ),
    "sigmoid_scale": Peer(
        "musubi-tuner",
        "logit_std",
        "musubi-tuner's `sigmoid` sampling is --timestep_sampling logit_normal with --logit_std its scale",
        sources=("m-common",),
    ),
    "min_timestep": Peer(
        "sd-scripts, musubi-tuner",
        None,
        "timesteps span the whole schedule (Wan A14B: the trained expert's part of it, --wan_expert)",
        sources=("k-util", "m-common"),
    ),
    "max_timestep": Peer(
        "sd-scripts, musubi-tuner",
        None,
        "timesteps span the whole schedule (Wan A14B: the trained expert's part of it, --wan_expert)",
        sources=("k-util", "m-common"),
    ),
    "dit_high_noise": Peer(
        "musubi-tuner",
        "wan_expert",
        "both Wan 2.2 A14B experts come from the diffusers "
        "folder; --wan_expert high, low or both picks the trained one",
        sources=("m-wan",),
    ),
    "timestep_boundary": Peer(
        "musubi-tuner", None, "the experts' boundary is the checkpoint's own (boundary_ratio)", sources=("m-wan",)
    ),
    "offload_inactive_dit": Peer("musubi-tuner", "offload_inactive_expert", sources=("m-wan",)),
    # SimpleTuner
    "model_family": Peer("SimpleTuner", "family", sources=("st",)),
    "model_flavour": Peer(
        "SimpleTuner", None, "the checkpoint (--pretrained_model_name_or_path) is the variant", sources=("st",)
    ),
    "model_type": Peer(
        "SimpleTuner",
        None,
        "dit-lora trains LoRA; --train_backbone trains chosen blocks in full beside it",
        sources=("st",),
    ),
    "pretrained_transformer_model_name_or_path": Peer(
        "SimpleTuner",
        "transformer_file",
        "a single .safetensors file; a separate transformer folder is not read",
        sources=("st",),
    ),
    "lora_rank": Peer("SimpleTuner, LLaMA-Factory, OneTrainer", "rank", sources=("st-fields", "lf-ft", "ot-config")),
    "lycoris_config": Peer("SimpleTuner", "lora_type", _LYCORIS_CONFIG, sources=("st-fields",)),
    "ema_config": Peer(
        "ai-toolkit", "use_ema", "its use_ema and ema_decay are --use_ema and --ema_decay", sources=("at-yaml",)
    ),
    "ema_cpu_only": Peer("SimpleTuner", "ema_device", "--ema_device cpu", sources=("st",)),
    "data_backend_config": Peer("SimpleTuner", None, f"no data backend JSON: {_DATA} per run", sources=("st",)),
    "caption_strategy": Peer("SimpleTuner", None, _CAPTIONS, sources=("st",)),
    "resolution_type": Peer(
        "SimpleTuner",
        "aspect_buckets",
        "--resolution is a side in pixels; `auto` buckets hold about its square",
        sources=("st",),
    ),
    "checkpoint_step_interval": Peer("SimpleTuner", "checkpointing_steps", sources=("st",)),
    "checkpoint_epoch_interval": Peer("SimpleTuner", "checkpointing_steps", _STEPS, sources=("st",)),
    "validation_step_interval": Peer("SimpleTuner", "validation_steps", sources=("st-fields",)),
    "validation_num_inference_steps": Peer("SimpleTuner", "validation_inference_steps", sources=("st-fields",)),
    "validation_guidance": Peer("SimpleTuner", "validation_guidance_scale", sources=("st-fields",)),
    "user_prompt_library": Peer(
        "SimpleTuner", "validation_prompt", "one prompt, not a library", sources=("st-fields",)
    ),
    "base_model_precision": Peer(
        "SimpleTuner", "quantize_base", "int8-*, fp8-*, nf4-bnb: --quantize_base int8, fp8 or nf4", sources=("st",)
    ),
    "flow_schedule_shift": Peer("SimpleTuner", "flow_shift", sources=("st-fields",)),
    "attention_mechanism": Peer("SimpleTuner", "attention_backend", sources=("st",)),
    "musubi_blocks_to_swap": Peer("SimpleTuner", "blocks_to_swap", sources=("st",)),
    "enable_group_offload": Peer(
        "SimpleTuner", "blocks_to_swap", "the last N blocks' frozen weights, with LoRA on them", sources=("st",)
    ),
    "eval_steps_interval": Peer(
        "SimpleTuner", "validation_steps", "the held-out loss shares the validation samples' schedule", sources=("st",)
    ),
    "eval_epoch_interval": Peer("SimpleTuner", "validation_steps", _STEPS, sources=("st",)),
    "eval_dataset_id": Peer(
        "SimpleTuner",
        "validation_data_dir",
        "a folder laid out as the training data (or --validation_split), not a data backend's id",
        sources=("st",),
    ),
    "eval_timesteps": Peer("SimpleTuner", None, _HELD_OUT_DRAW, sources=("st",)),
    "eval_loss_disable": Peer(
        "SimpleTuner",
        None,
        "the held-out loss is computed only with --validation_split or --validation_data_dir",
        sources=("st",),
    ),
    "lr": Peer("ai-toolkit", "learning_rate", sources=("at",)),
    "steps": Peer("ai-toolkit", "max_train_steps", sources=("at",)),
    "batch_size": Peer("ai-toolkit, OneTrainer", "train_batch_size", sources=("at", "ot-config")),
    "linear": Peer("ai-toolkit", "rank", sources=("at",)),
    "linear_alpha": Peer("ai-toolkit", "lora_alpha", sources=("at",)),
    "type": Peer("ai-toolkit", "lora_type", "network: type: lora or lokr", sources=("at",)),
    "lokr_full_rank": Peer(
        "ai-toolkit",
        None,
        "with --lora_type lokr, a --rank of at least half each Kronecker factor's size keeps both factors whole "
        "(PEFT); leave --lora_alpha unset (alpha = rank, scale 1 as ai-toolkit's full-rank LoKr)",
        sources=("at",),
    ),
    "save_every": Peer("ai-toolkit", "checkpointing_steps", sources=("at",)),
    "max_step_saves_to_keep": Peer("ai-toolkit", "checkpoints_total_limit", sources=("at",)),
    "sample_every": Peer("ai-toolkit", "validation_steps", sources=("at",)),
    "prompts": Peer("ai-toolkit", "validation_prompt", "one prompt, not a list", sources=("at-yaml",)),
    "sample_steps": Peer("ai-toolkit", "validation_inference_steps", sources=("at",)),
    "folder_path": Peer("ai-toolkit", "train_data_dir", sources=("at",)),
    "caption_ext": Peer("ai-toolkit", "caption_extension", "with its dot: `.txt`", sources=("at",)),
    "num_repeats": Peer("ai-toolkit", None, _REPEATS, sources=("at",)),
    "trigger_word": Peer(
        "ai-toolkit", None, "write it into the captions, or give one caption with --instance_prompt", sources=("at",)
    ),
    "default_caption": Peer(
        "ai-toolkit",
        None,
        "uncaptioned images in a kohya N_words/ folder take the folder's "
        "words; --instance_prompt gives every image one caption",
        sources=("at",),
    ),
    "flip_x": Peer("ai-toolkit", "random_flip", sources=("at",)),
    "shuffle_tokens": Peer("ai-toolkit", None, "captions are used as written", sources=("at-yaml",)),
    "name_or_path": Peer("ai-toolkit", "pretrained_model_name_or_path", sources=("at-yaml",)),
    "quantize": Peer(
        "ai-toolkit",
        "quantize_base",
        "the transformer at its qtype, qfloat8 by default: --quantize_base fp8_scaled (any GPU) or fp8 (torchao, CUDA "
        "8.9+); qtype says which",
        sources=("at-yaml",),
    ),
    "quantize_te": Peer("ai-toolkit", "quantize_text_encoder", "nf4 through bitsandbytes", sources=("at-yaml",)),
    "training_folder": Peer("ai-toolkit", "output_dir", sources=("at-yaml",)),
    "dtype": Peer(
        "ai-toolkit",
        "mixed_precision",
        "train: dtype is the compute precision (bf16 by default); "
        "save: dtype has no counterpart (fp32 LoRA masters are saved)",
        sources=("at",),
    ),
    "timestep_type": Peer(
        "ai-toolkit",
        "timestep_sampling",
        "`sigmoid` is `logit_normal` (mean 0, std 1), `linear` is `uniform`",
        sources=("at",),
    ),
    "layer_offloading": Peer("ai-toolkit", "blocks_to_swap", "a number of blocks, not a percentage", sources=("at",)),
    "mask_path": Peer(
        "ai-toolkit",
        None,
        "a mask beside each image (`<name>_mask.png`) or named by the metadata's `mask` column, with --masked_loss",
        sources=("at",),
    ),
    "mask_min_value": Peer(
        "ai-toolkit", "unmasked_weight", "with --masked_loss; each latent pixel weighs max(mask, it)", sources=("at",)
    ),
    "alpha_mask": Peer(
        "sd-scripts, ai-toolkit",
        None,
        "dit-lora reads a mask file, not the image's alpha (which is composited on white): save the alpha as "
        "`<name>_mask.png` beside the image (a mask's transparent pixels count as black) and pass --masked_loss",
        sources=("k-util", "at"),
    ),
    "low_vram": Peer(
        "ai-toolkit",
        None,
        "`dit-lora plan` says what fits; --blocks_to_swap and --quantize_base save device memory",
        sources=("at-yaml",),
    ),
    # diffusion-pipe (keys of its TOML run config): its evaluation, the held-out loss
    "eval_datasets": Peer(
        "diffusion-pipe",
        "validation_data_dir",
        "one held-out folder laid out as the training data (or --validation_split), not a list of dataset configs",
        sources=("dp",),
    ),
    "eval_every_n_steps": Peer(
        "diffusion-pipe", "validation_steps", "shared with the validation samples' schedule", sources=("dp",)
    ),
    "eval_every_n_epochs": Peer("diffusion-pipe", "validation_steps", _STEPS, sources=("dp",)),
    "eval_before_first_step": Peer(
        "diffusion-pipe", None, "a fresh run always computes the held-out loss before its first update", sources=("dp",)
    ),
    "eval_micro_batch_size_per_gpu": Peer(
        "diffusion-pipe",
        None,
        "each held-out sample is evaluated alone (a batch of one), so no bucket drops any; " + _HELD_OUT_DRAW,
        sources=("dp",),
    ),
}

# LLaMA-Factory's, kept in their own module (dit_lora/config/peers_llamafactory.py)
PEER_FLAGS.update(
    {
        name: Peer(llamafactory.TRAINER, option, note, sources=sources)
        for name, (option, note, sources) in llamafactory.FLAGS.items()
    }
)
# the peers' memory settings, kept in their own module (dit_lora/config/peers_memory.py)
PEER_FLAGS.update(
    {
        name: Peer(trainers, option, note, sources=sources)
        for name, (trainers, option, note, sources) in memory.FLAGS.items()
    }
)

#: peer options dit-lora spells the same way (same meaning unless the page says otherwise), by peer (PEERS keys)
SAME_NAMES: dict[str, tuple[str, ...]] = {
    "diffusers": (
        "pretrained_model_name_or_path",
        "revision",
        "variant",
        "instance_data_dir",
        "instance_prompt",
        "train_data_dir",
        "dataset_name",
        "dataset_config_name",
        "image_column",
        "caption_column",
        "video_column",
        "max_train_samples",
        "resolution",
        "center_crop",
        "random_flip",
        "cache_latents",
        "cache_dir",
        "max_sequence_length",
        "complex_human_instruction",
        "height",
        "width",
        "max_num_frames",
        "rank",
        "lora_alpha",
        "lora_dropout",
        "lora_layers",
        "use_dora",
        "output_dir",
        "seed",
        "train_batch_size",
        "num_train_epochs",
        "max_train_steps",
        "gradient_accumulation_steps",
        "gradient_checkpointing",
        "learning_rate",
        "scale_lr",
        "lr_scheduler",
        "lr_warmup_steps",
        "lr_num_cycles",
        "lr_power",
        "max_grad_norm",
        "adam_beta1",
        "adam_beta2",
        "adam_weight_decay",
        "adam_epsilon",
        "use_8bit_adam",
        "mixed_precision",
        "allow_tf32",
        "checkpointing_steps",
        "checkpoints_total_limit",
        "resume_from_checkpoint",
        "validation_prompt",
        "num_validation_images",
        "dataloader_num_workers",
        "weighting_scheme",
        "logit_mean",
        "logit_std",
        "mode_scale",
        "report_to",
        "logging_dir",
        "push_to_hub",
        "hub_model_id",
        "enable_slicing",
        "enable_tiling",
        "use_ema",
    ),
    "kohya": (
        "pretrained_model_name_or_path",
        "train_data_dir",
        "resolution",
        "caption_extension",
        "cache_latents",
        "seed",
        "train_batch_size",
        "max_train_steps",
        "gradient_accumulation_steps",
        "gradient_checkpointing",
        "learning_rate",
        "lr_scheduler",
        "lr_warmup_steps",
        "max_grad_norm",
        "use_8bit_adam",
        "mixed_precision",
        "output_dir",
        "logging_dir",
        "weighting_scheme",
        "logit_mean",
        "logit_std",
        "mode_scale",
        "timestep_sampling",
        "flow_shift",
        "blocks_to_swap",
        "masked_loss",
    ),
    "simpletuner": (
        "pretrained_model_name_or_path",
        "resolution",
        "lora_alpha",
        "lora_dropout",
        "seed",
        "train_batch_size",
        "num_train_epochs",
        "max_train_steps",
        "gradient_accumulation_steps",
        "gradient_checkpointing",
        "learning_rate",
        "lr_scheduler",
        "lr_warmup_steps",
        "max_grad_norm",
        "mixed_precision",
        "checkpointing_steps",
        "checkpoints_total_limit",
        "resume_from_checkpoint",
        "validation_steps",
        "validation_prompt",
        "report_to",
        "tracker_project_name",
        "logging_dir",
        "push_to_hub",
        "hub_model_id",
        "output_dir",
        "caption_dropout_probability",
        "use_ema",
        "ema_decay",
        "ema_device",
        "ema_update_interval",
        "ema_validation",
        "lora_type",
    ),
    "ai-toolkit": (
        "resolution",
        "gradient_accumulation_steps",
        "gradient_checkpointing",
        "lr_scheduler",
        "seed",
        "num_frames",
        "lokr_factor",
    ),
    # read in examples/main_example.toml ("dp"; rank: its [adapter] table); its `compile` is a boolean: dit-lora's --compile blocks/full
    "diffusion-pipe": ("output_dir", "gradient_accumulation_steps", "lr_scheduler", "blocks_to_swap", "rank"),
    # read in modules/util/config/TrainConfig.py ("ot-config"): the last two are keys of a model part (transformer)
    "onetrainer": ("resolution", "learning_rate", "gradient_checkpointing", "activation_offloading"),
    "llamafactory": llamafactory.SAME_NAMES,
}

#: same spelling, another meaning: the peer's sense, and what to pass to dit-lora
SAME_NAME_CAVEATS: dict[str, str] = {
    "ema_validation": "SimpleTuner's none / ema_only / comparison are dit-lora's trained / ema / both",
    "resolution": "kohya, SimpleTuner and ai-toolkit also take `W,H`, megapixels or a list; dit-lora's is one "
    "side in pixels (aspect buckets hold about its square)",
    "timestep_sampling": "musubi-tuner's choices (sigma, shift, sigmoid, ...) are not dit-lora's (uniform, "
    "logit_normal; CogVideoX and Wan): `sigmoid` is logit_normal",
    "flow_shift": "musubi-tuner's --flow_shift is the sampling shift of its generation scripts; its training "
    "shift is --discrete_flow_shift, which is dit-lora's --flow_shift (Wan)",
    "num_frames": "ai-toolkit's datasets: num_frames is a clip's frame count: for Wan and CogVideoX pass "
    "--max_num_frames or --frame_buckets; dit-lora's --num_frames is the video LLMs' frames per clip. Its `sample` "
    "section's num_frames is the sample video's length, not what trains: a dataset without num_frames trains on "
    "single frames (its 24 GB Wan examples), --max_num_frames 1",
    "gradient_checkpointing": "ai-toolkit and OneTrainer (a key of each model part: the transformer's) turn it on "
    "by default; dit-lora's default is the family's",
    "lora_type": "SimpleTuner's values are `standard` (dit-lora's `lora`) and `lycoris` (its --lycoris_config "
    "names the algorithm: dit-lora's `lokr` or `loha`, with --lokr_factor and the type's own options)",
    **llamafactory.CAVEATS,
}


def peer_hint(name: str, valid: Iterable[str]) -> str | None:
    """The sentence for ``name``, another trainer's option: dit-lora's counterpart (in ``valid``, the run's options;
    or another family's), or that there is none and what to do; None when ``name`` is no known peer option."""
    name = name.lstrip("-")
    peer = PEER_FLAGS.get(name)
    if peer is None:
        return None
    said = f" ({peer.note})" if peer.note else ""
    for option, note in peer.also:  # this family's own name for the meaning
        if option in set(valid):
            return f"--{name} comes from {peer.trainers}; dit-lora's option for this family is --{option} ({note})."
    if peer.option is not None and peer.option in set(valid):
        return f"--{name} comes from {peer.trainers}; dit-lora's option is --{peer.option}{said}."
    holders = owners(peer.option) if peer.option else []
    if holders:
        return (
            f"--{name} comes from {peer.trainers}; dit-lora's option is --{peer.option}, an option of "
            f"--family {' or '.join(holders)}{said}."
        )
    return f"--{name} ({peer.trainers}) has no dit-lora equivalent: {peer.fallback or peer.note}."


def peer_names(peer: str) -> list[str]:
    """The :data:`PEER_FLAGS` names ``peer`` (a :data:`PEERS` key) uses, sorted."""
    words = PEERS[peer][1]
    return sorted(name for name, entry in PEER_FLAGS.items() if any(w in entry.trainers for w in words))


def _cell(text: str) -> str:
    return text.replace("|", "\\|")


def migration_table(peer: str) -> str:
    """The Markdown table of ``peer``'s (a :data:`PEERS` key) options and dit-lora's counterparts, as
    ``docs/guides/migrating.md`` holds it (its rows: their option, dit-lora's or "none: ...", the source)."""
    rows = ["| their option | dit-lora | read in |", "|---|---|---|"]
    for name in peer_names(peer):
        entry = PEER_FLAGS[name]
        if entry.option is None:
            ours = f"none: {entry.note}"
        else:
            holders = owners(entry.option)
            ours = f"`--{entry.option}`" + (f" (--family {', '.join(holders)})" if holders else "")
            ours += f": {entry.note}" if entry.note else ""
        for option, note in entry.also:
            ours += f"; `--{option}` (--family {', '.join(owners(option))}): {note}"
        where = "; ".join(SOURCES[key] for key in entry.sources)
        rows.append(f"| `{name}` | {_cell(ours)} | {_cell(where)} |")
    return "\n".join(rows)


def same_names_line(peer: str) -> str:
    """The sentence listing ``peer``'s options that dit-lora spells the same way."""
    names = ", ".join(f"`--{n}`" for n in SAME_NAMES[peer])
    return f"Same name in dit-lora: {names}."


def migration_tables() -> str:
    """Every peer's table and same-name line, the text between the page's generated markers."""
    parts = []
    for peer, (title, _) in PEERS.items():
        parts += [f"### {title}", "", same_names_line(peer), "", migration_table(peer), ""]
    parts += ["### Same name, other meaning", ""]
    parts += [f"- `--{name}`: {text}." for name, text in SAME_NAME_CAVEATS.items()]
    return "\n".join(parts) + "\n"


if __name__ == "__main__":  # python -m dit_lora.config.peers: the tables of docs/guides/migrating.md
    print(migration_tables(), end="")
