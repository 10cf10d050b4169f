"""LLaMA-Factory's options that a video-LLM user brings, and dit-lora's counterparts (a part of :mod:`.peers`).

LLaMA-Factory trains the same video LLMs (LLaVA-NeXT-Video, Qwen2.5-VL, Qwen3-VL, InternVL) from a YAML of its
``ModelArguments``, ``DataArguments``, ``FinetuningArguments`` and transformers' ``Seq2SeqTrainingArguments``. Each
row was read in the file of :data:`SOURCES` it names (the 2026 snapshot of hiyouga/LLaMA-Factory);
:mod:`dit_lora.config.peers` merges them into its table, so the unknown-option message and
``docs/guides/migrating.md`` say them like every other peer's.
"""

from __future__ import annotations

__all__ = ["CAVEATS", "FLAGS", "SAME_NAMES", "SOURCES", "TRAINER"]

#: how the rows name the trainer (the word of ``peers.PEERS`` that finds them)
TRAINER = "LLaMA-Factory"

SOURCES: dict[str, str] = {
    "lf-data": "LLaMA-Factory src/llamafactory/hparams/data_args.py",
    "lf-model": "LLaMA-Factory src/llamafactory/hparams/model_args.py",
    "lf-ft": "LLaMA-Factory src/llamafactory/hparams/finetuning_args.py",
    "lf-yaml": "LLaMA-Factory examples/train_lora/qwen3vl_lora_sft.yaml",
    "lf-yaml-vl": "LLaMA-Factory examples/train_lora/qwen2_5vl_lora_sft.yaml, llava1_5_lora_sft.yaml",
}

#: LLaMA-Factory's option -> (dit-lora's option or None, the note, the SOURCES keys it was read in)
FLAGS: dict[str, tuple[str | None, str, tuple[str, ...]]] = {
    "model_name_or_path": (
        "pretrained_model_name_or_path",
        "a Hub id (downloaded into the Hugging Face cache) or a local model folder; --family is read from its config.json",
        ("lf-model",),
    ),
    "dataset": (
        "dataset_info_name",
        "the dataset of dataset_info.json in --train_data_dir; one per run (no comma list)",
        ("lf-data",),
    ),
    "dataset_dir": (
        "train_data_dir",
        "the folder holding dataset_info.json (or pass the data file itself)",
        ("lf-data",),
    ),
    "media_dir": (
        "video_folder",
        "relative `videos` paths resolve there; by default the dataset_info.json folder, as in LLaMA-Factory",
        ("lf-data",),
    ),
    "template": (
        None,
        "the chat template is the model folder's own (its tokenizer's), so there is nothing to choose",
        ("lf-data",),
    ),
    "finetuning_type": (
        "lora_type",
        "`lora` is the default (also dora, lokr, loha); `full`, `freeze` and `oft` are not offered",
        ("lf-ft",),
    ),
    "lora_target": (
        "lora_layers",
        "`all` is the default: the language model's q/k/v/o/gate/up/down projections; a list names projections",
        ("lf-ft",),
    ),
    "freeze_vision_tower": (
        "train_vision_tower",
        "inverted: `freeze_vision_tower: false` is --train_vision_tower (trained fully at "
        "--vision_tower_learning_rate); both freeze it by default",
        ("lf-ft",),
    ),
    "freeze_multi_modal_projector": (
        "backbone_learning_rate",
        "dit-lora trains the projector fully by default, at --backbone_learning_rate; LLaMA-Factory freezes it",
        ("lf-ft",),
    ),
    "enable_liger_kernel": ("use_liger_kernel", "", ("lf-model",)),
    "cutoff_len": (
        "max_sequence_length",
        "LLaMA-Factory truncates the tokens past it; dit-lora cuts a conversation's last question-answer rounds to "
        "fit and refuses one whose first round does not (check-data names them)",
        ("lf-data",),
    ),
    "video_maxlen": (
        "num_frames",
        "frames per clip: always that many, spread evenly over the whole clip (not a cap on a rate)",
        ("lf-model",),
    ),
    "video_fps": (
        None,
        "dit-lora samples --num_frames frames spread evenly over the whole clip instead of a rate",
        ("lf-model",),
    ),
    "video_max_pixels": (
        None,
        "the model folder's video preprocessor config sets the frame size",
        ("lf-model",),
    ),
    "image_max_pixels": (None, "dit-lora's video LLMs train on clips only", ("lf-model",)),
    "max_samples": ("max_train_samples", "the first N entries, as in LLaMA-Factory", ("lf-data", "lf-yaml")),
    "val_size": (
        "validation_split",
        "a fraction (not a count); which samples is decided by --seed and their names",
        ("lf-data",),
    ),
    "stage": (None, "`sft` is what the video LLMs train; pt, rm, ppo, dpo and kto are not offered", ("lf-ft",)),
    "per_device_train_batch_size": ("train_batch_size", "", ("lf-yaml",)),
    "lr_scheduler_type": ("lr_scheduler", "", ("lf-yaml",)),
    "warmup_ratio": ("lr_warmup_steps", "a number of updates, not a ratio", ("lf-yaml",)),
    "save_steps": ("checkpointing_steps", "", ("lf-yaml",)),
    "bf16": ("mixed_precision", "`--mixed_precision bf16`, the default", ("lf-yaml",)),
    "fp16": ("mixed_precision", "`--mixed_precision fp16` needs --allow_fp16 (bf16 is the default)", ("lf-yaml",)),
    # the other keys of LLaMA-Factory's example YAMLs: each one's meaning in dit-lora, none a guess
    "trust_remote_code": (
        None,
        "not needed: the video LLMs load with transformers' own classes, and no model folder's code is run",
        ("lf-yaml", "lf-yaml-vl"),
    ),
    "do_train": (None, "`dit-lora train` always trains", ("lf-yaml", "lf-yaml-vl")),
    "preprocessing_num_workers": (
        None,
        "nothing is preprocessed ahead: each conversation is tokenized when its batch is loaded, in the data "
        "loader's workers (--dataloader_num_workers)",
        ("lf-yaml", "lf-yaml-vl"),
    ),
    "overwrite_cache": (
        None,
        "no tokenized cache is kept for the video LLMs (each conversation is tokenized when its batch is loaded)",
        ("lf-yaml-vl",),
    ),
    "logging_steps": (
        None,
        "the progress line and the tracker (--report_to) get every update's values; --logging_dir is the "
        "tracker's folder",
        ("lf-yaml", "lf-yaml-vl"),
    ),
    "plot_loss": (None, "every run writes its loss curve beside the adapter (the `plot` extra)", ("lf-yaml",)),
    "save_only_model": (
        None,
        "a checkpoint (--checkpointing_steps) keeps what a resume needs, optimizer included; the run's output "
        "is the adapter",
        ("lf-yaml", "lf-yaml-vl"),
    ),
    "ddp_timeout": (
        None,
        "several processes start with `dit-lora launch` and torch's own timeout; a failure on one process is "
        "raised on every process rather than left waiting",
        ("lf-yaml", "lf-yaml-vl"),
    ),
    "eval_strategy": (
        "validation_steps",
        "the held-out loss (--validation_split) is computed every --validation_steps updates and before the first",
        ("lf-yaml", "lf-yaml-vl"),
    ),
    "eval_steps": ("validation_steps", "shared with the validation samples' schedule", ("lf-yaml", "lf-yaml-vl")),
    "per_device_eval_batch_size": (
        None,
        "each held-out sample is evaluated alone (a batch of one)",
        ("lf-yaml", "lf-yaml-vl"),
    ),
}

#: LLaMA-Factory options dit-lora spells the same way (same meaning unless :data:`CAVEATS` says otherwise)
SAME_NAMES: tuple[str, ...] = (
    "lora_alpha",
    "lora_dropout",
    "use_dora",
    "learning_rate",
    "num_train_epochs",
    "gradient_accumulation_steps",
    "max_grad_norm",
    "output_dir",
    "seed",
    "report_to",
    "resume_from_checkpoint",
    "dataloader_num_workers",
    "overwrite_output_dir",
)

#: same spelling, another meaning
CAVEATS: dict[str, str] = {
    "lora_alpha": "LLaMA-Factory's default is twice lora_rank; dit-lora's is --rank (a scale of 1): pass it",
    "overwrite_output_dir": "dit-lora's replaces a finished run's adapter there and, without a resume, removes an "
    "earlier run's checkpoints; a folder a run is still using is never overridden",
}
